"""How much each calibration constant and named assumption moves trnsim's error.

For every constant in the hardware spec that was calibrated or assumed (rather than read off a
page), the calibration rows it can affect are predicted again with the constant set to its
documented default (or, where nothing is documented, the plain alternative named below), and
the script prints, as JSON, the per-row errors and the MAPE of the calibration rows (seed-1..8,
neuron-inf2-*, the nki-matmul-* tutorial kernels), of each kind (model, kernel, collective) and
of the collective rows, before and after.

    PYTHONPATH=src python benchmarks/accuracy.py            # all knobs (~10 minutes cold)
    PYTHONPATH=src python benchmarks/accuracy.py --knob descriptor_overhead

Model rows compile through the compile cache ($TRNSIM_CACHE_DIR), keyed on the whole core spec,
so a variant never reads the baseline's programs and a second run is fast.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

from trnsim import hardware
from trnsim.hardware.cores import NC_V2_SCALAR, NC_V2_VECTOR
from trnsim.perf.validate import default_csv, mape, read_rows, validate

CALIBRATION_PREFIXES = ("seed-", "neuron-inf2-", "nki-matmul-")
KINDS = ("model", "kernel", "collective")


@dataclass(frozen=True)
class Knob:
    key: str
    constant: str  # where it lives in the hardware spec
    value: str  # what trnsim uses, and why
    default: str  # what it is set to here, and why that is the documented default
    core: int | None = None  # core version whose spec changes
    core_changes: dict = field(default_factory=dict)
    fabric_chip: str | None = None
    fabric_changes: dict = field(default_factory=dict)
    host_changes: dict = field(default_factory=dict)  # every instance's host (model rows)


KNOBS = (
    Knob("descriptor_overhead", "hardware.cores.DmaSpec.descriptor_overhead_bytes (NeuronCore-v2)",
         "256 B per contiguous chunk (ASSUMPTION from the DMA guide's 2 KiB / 4 KiB rules)",
         "0: the documented 17 B/ns per engine for any chunk size",
         core=2, core_changes={"dma": {"descriptor_overhead_bytes": 0}}),
    Knob("dma_transfer_overhead", "hardware.cores.DmaSpec.transfer_overhead_ns (NeuronCore-v2)",
         "600 ns per transfer per engine (ASSUMPTION: NC-v3's documented ~600 ns per DGE "
         "instruction; NC-v2's per-transfer overhead is named, not quantified)",
         "0: no per-transfer overhead (only per-descriptor)",
         core=2, core_changes={"dma": {"transfer_overhead_ns": 0.0}}),
    Knob("dma_rate", "hardware.cores.DmaSpec.bytes_per_s_per_engine (NeuronCore-v2)",
         "17 GB/s per engine (nki-dma-bandwidth-guide)",
         "27.2 GB/s: the other figure the same page gives (hardware.md section 6 fact 7)",
         core=2, core_changes={"dma": {"bytes_per_s_per_engine": 27.2e9}}),
    Knob("v1_sbuf", "hardware.cores.NC_V1.sbuf_bytes_per_partition",
         "96 KiB per partition (ASSUMPTION: NC-v1 SRAM undocumented; half of NC-v2)",
         "192 KiB: NeuronCore-v2's, the nearest documented figure",
         core=1, core_changes={"sbuf_bytes_per_partition": 192 * 1024}),
    Knob("v1_vector_scalar", "hardware.cores.NC_V1.vector/scalar clock_hz and "
         "elements_per_lane_per_cycle",
         "NC-v2 rates / 10 and / 3 (nc-v2's 'x10' and 'x3' claims), clocks from nc-v1's 256 and "
         "512 FLOP per cycle (ASSUMPTION: 128 lanes)",
         "NeuronCore-v2's VectorE and ScalarE",
         core=1, core_changes={engine.name: {"clock_hz": engine.clock_hz,
                                             "elements_per_lane_per_cycle":
                                             engine.elements_per_lane_per_cycle}
                               for engine in (NC_V2_VECTOR, NC_V2_SCALAR)}),
    Knob("collective_bandwidth", "hardware.fabric.FabricSpec.collective_bytes_per_s_per_core",
         "calibrated: 1 GiB / (18,930 us - 58 us) from nccom-allreduce-2r-1GiB",
         "the core's whole DMA bandwidth (16 x 17 GB/s), uncalibrated",
         fabric_chip="Trainium",
         fabric_changes={"collective_bytes_per_s_per_core": hardware.core(2).dma.bytes_per_s}),
    Knob("collective_launch", "hardware.fabric.FabricSpec.launch_latency_ns",
         "calibrated: the 58 us nccom-test floor minus two hop latencies",
         "0: no documented launch cost", fabric_chip="Trainium",
         fabric_changes={"launch_latency_ns": 0.0}),
    Knob("collective_issue", "hardware.fabric.FabricSpec.issue_interval_ns",
         "calibrated: the 58 us nccom-test floor", "0: no documented issue cost",
         fabric_chip="Trainium", fabric_changes={"issue_interval_ns": 0.0}),
    Knob("collective_copy_floor", "hardware.fabric.FabricSpec.copy_launch_latency_ns / "
         "copy_issue_interval_ns",
         "calibrated: the nccom-test doc's 8-rank all-gather floor (10 us at 1 KiB)",
         "the all-reduce's 58 us floor for every collective (trnsim before this split)",
         fabric_chip="Trainium",
         fabric_changes={"copy_launch_latency_ns": hardware.fabric_spec("Trainium").launch_latency_ns,
                         "copy_issue_interval_ns": hardware.fabric_spec("Trainium").issue_interval_ns}),
    Knob("host_dispatch", "hardware.host.HostSpec.dispatch_ns (every instance)",
         "200 us per model call (Neuron Explorer troubleshooting: ~0.2 ms queue submission "
         "time of a model call through PyTorch)",
         "0: end to end is device time plus the PCIe copies only",
         host_changes={"dispatch_ns": 0.0}),
    Knob("pcie_width", "hardware.host.HostSpec.pcie_lanes_per_chip (every instance)",
         "x16 (ASSUMPTION: no Neuron instance publishes its chips' host-link width)",
         "x8: half the link rate", host_changes={"pcie_lanes_per_chip": 8}),
)


def _affected(knob: Knob, rows: list[dict]) -> set[str]:
    out = set()
    for row in rows:
        if knob.host_changes:
            if row["kind"] == "model":
                out.add(row["id"])
            continue
        if knob.fabric_chip:
            if row["kind"] == "collective":
                out.add(row["id"])
            continue
        try:
            version = hardware.instance(row["instance"]).chip.core.version
        except Exception:
            continue
        if version == knob.core and row["kind"] in ("model", "kernel"):
            out.add(row["id"])
    return out


def _summary(results) -> dict:
    calibration = [r for r in results if r.id.startswith(CALIBRATION_PREFIXES)]
    return {"calibration_mape_pct": mape(calibration),
            "collective_mape_pct": mape([r for r in results if r.kind == "collective"]),
            "mape_pct_by_kind": {kind: mape(results, kind) for kind in KINDS},
            "rows": {r.id: {"predicted": r.predicted, "measured": r.measured,
                            "error_pct": r.error_pct, "status": r.status, "reason": r.reason}
                     for r in results}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--knob", action="append", help="only these knobs (by key)")
    args = parser.parse_args()
    rows = read_rows(default_csv())
    start = time.perf_counter()
    baseline_results = validate()
    baseline = _summary(baseline_results)
    report = {"baseline": {k: baseline[k] for k in ("calibration_mape_pct", "collective_mape_pct",
                                                     "mape_pct_by_kind")},
              "baseline_rows": baseline["rows"], "knobs": []}
    for knob in KNOBS:
        if args.knob and knob.key not in args.knob:
            continue
        ids = _affected(knob, rows)
        context = (hardware.core_variant(knob.core, **knob.core_changes) if knob.core
                   else hardware.fabric_variant(knob.fabric_chip, **knob.fabric_changes)
                   if knob.fabric_chip
                   else hardware.host_variant(**knob.host_changes) if knob.host_changes
                   else nullcontext())
        with context:
            changed = {r.id: r for r in validate(ids=ids)}
        merged = [changed.get(r.id, r) for r in baseline_results]
        summary = _summary(merged)
        report["knobs"].append({
            "knob": knob.key, "constant": knob.constant, "trnsim_value": knob.value,
            "set_to": knob.default,
            "calibration_mape_pct": summary["calibration_mape_pct"],
            "collective_mape_pct": summary["collective_mape_pct"],
            "mape_pct_by_kind": summary["mape_pct_by_kind"],
            "rows_changed": {i: summary["rows"][i]["error_pct"] for i in sorted(ids)},
            "rows_not_predicted": {i: summary["rows"][i]["reason"] for i in sorted(ids)
                                   if summary["rows"][i]["status"] != "ok"},
        })
    report["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
