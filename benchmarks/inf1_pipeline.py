"""neuron-cc's NeuronCore Pipeline at full size: BERT-large on inf1 over 4, 16 and 64 cores.

Per configuration: seconds for trnsim.trace + report, latency through all stages, streaming
throughput of the instance, how many stages keep their weights on chip, and the device-memory
bytes one inference reads. The baseline is the default: one core per model, a copy per core.

Run: PYTHONPATH=src python benchmarks/inf1_pipeline.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
RUNS = (("inf1.xlarge", None), ("inf1.xlarge", 4), ("inf1.6xlarge", 16), ("inf1.24xlarge", 64))


def main() -> None:
    import torch
    import transformers as T

    import trnsim
    from trnsim.sim.execution_plan import weights_on_chip

    torch.manual_seed(0)
    model = T.BertModel(T.BertConfig(hidden_size=1024, num_hidden_layers=24,
                                     num_attention_heads=16, intermediate_size=4096)).eval()
    inputs = (torch.randint(0, 30000, (1, 128)),)
    results = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRNSIM_CACHE_DIR"] = cache
        for instance, stages in RUNS:
            start = time.perf_counter()
            compiled = trnsim.trace(model, inputs, instance=instance, pipeline_cores=stages)
            report = compiled.report()
            cached = sum(weights_on_chip(p) for p in compiled.programs())
            results.append({"instance": instance, "pipeline_cores": stages or 1,
                            "trace_and_report_s": round(time.perf_counter() - start, 2),
                            "latency_ms": round(report.latency_ms, 3),
                            "throughput_per_s": round(report.throughput_per_s, 1),
                            "copies": report.copies, "stages_with_weights_on_chip": cached,
                            "dram_read_bytes_per_inference": report.hbm_read_bytes})
    print(json.dumps({"benchmark": "inf1_pipeline", "model": "bert-large-uncased bs1 seq128",
                      "python": sys.version.split()[0], "results": results}, indent=2))


if __name__ == "__main__":
    main()
