"""Generation rows in `trnsim validate`: TTFT and TPOT predicted from the step simulation."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trnsim.perf.serving.validation import tensor_parallel
from trnsim.perf.validate import validate

CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 128, "max_position_embeddings": 512}
HEADER = ("id,kind,name,instance,cores,dtype,batch,seq,metric,value,unit,source,notes,nodes,"
          "parallelism,global_batch,optimizer,input_tokens,output_tokens,concurrency\n")


def test_parallelism_is_read_as_a_tensor_parallel_degree():
    assert tensor_parallel("TP32") == 32 and tensor_parallel("") == 1
    with pytest.raises(Exception, match="TP<N>"):
        tensor_parallel("PP4")


def test_generation_rows_predict_ttft_and_median_tpot(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tiny.json").write_text(json.dumps(CONFIG))
    rows = [f"g-{m},generation,tiny.json,inf2.xlarge,1,bf16,1,256,{m},1.0,ms,test,,,TP1,,,100,60,1"
            for m in ("ttft", "tpot")]
    rows.append("g-bad,generation,tiny.json,inf2.xlarge,1,bf16,1,256,tpot,1.0,ms,test,,,PP2,,,"
                "100,60,1")
    (tmp_path / "rows.csv").write_text(HEADER + "\n".join(rows) + "\n")
    unasked = {r.id: r for r in validate(tmp_path / "rows.csv")}
    assert unasked["g-ttft"].status == "skipped" and "--kinds generation" in unasked["g-ttft"].reason
    results = {r.id: r for r in validate(tmp_path / "rows.csv", kinds=("generation",))}
    ttft, tpot, bad = results["g-ttft"], results["g-tpot"], results["g-bad"]
    assert ttft.status == "ok" and tpot.status == "ok", (ttft.reason, tpot.reason)
    assert ttft.predicted > 0 and tpot.predicted > 0
    assert ttft.error_pct == pytest.approx(100 * (ttft.predicted - 1.0))
    # 59 decode steps at 101..159 positions: 28 at bucket 128 and 31 at 256, so the median is
    # bucket 256's step, which takes longer than bucket 128's
    cache = json.loads(next((tmp_path / "cache" / "serving").glob("steps-*.json")).read_text())
    steps = cache["times"]
    assert tpot.predicted == pytest.approx(steps["decode:1:256:layers=1"])
    assert steps["decode:1:256:layers=1"] > steps["decode:1:128:layers=1"]
    assert bad.status == "skipped" and "TP<N>" in bad.reason


def test_a_row_with_int8_weight_storage_times_int8_weights(tmp_path, monkeypatch):
    """dtype ``bf16+int8``: the published "Weight Storage Data Type" int8; the step cache keys
    the deployment's quantization, and a weight dtype trnsim does not model is refused."""
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tiny.json").write_text(json.dumps(CONFIG))
    rows = [f"g-{d},generation,tiny.json,inf2.xlarge,1,{d},1,256,ttft,1.0,ms,test,,,TP1,,,100,"
            f"60,1" for d in ("bf16", "bf16+int8", "bf16+int4")]
    (tmp_path / "rows.csv").write_text(HEADER + "\n".join(rows) + "\n")
    results = {r.id: r for r in validate(tmp_path / "rows.csv", kinds=("generation",))}
    assert results["g-bf16"].status == results["g-bf16+int8"].status == "ok"
    assert results["g-bf16+int4"].status != "ok" and "+int8" in results["g-bf16+int4"].reason
    deployments = sorted(json.loads(p.read_text())["deployment"].get("quantize", "-")
                         for p in (tmp_path / "cache" / "serving").glob("steps-*.json"))
    assert deployments == ["-", "int8"]


def test_weight_storage_named_in_the_notes_times_int8_weights(tmp_path, monkeypatch):
    """The calibration set transcribes the published "Weight Storage Data Type" in the notes
    ("weight storage int8 as published") and leaves dtype bf16: that row times int8 weights."""
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tiny.json").write_text(json.dumps(CONFIG))
    row = ("g-noted,generation,tiny.json,inf2.xlarge,1,bf16,1,256,ttft,1.0,ms,test,"
           '"p50; weight storage int8 as published",,TP1,,,100,60,1')
    (tmp_path / "rows.csv").write_text(HEADER + row + "\n")
    (result,) = validate(tmp_path / "rows.csv", kinds=("generation",))
    assert result.status == "ok", result.reason
    deployments = [json.loads(p.read_text())["deployment"].get("quantize", "-")
                   for p in (tmp_path / "cache" / "serving").glob("steps-*.json")]
    assert deployments == ["int8"]
    (tmp_path / "rows.csv").write_text(HEADER + row.replace("int8 as", "int4 as") + "\n")
    (refused,) = validate(tmp_path / "rows.csv", kinds=("generation",))
    assert refused.status != "ok" and "'int4'" in refused.reason
