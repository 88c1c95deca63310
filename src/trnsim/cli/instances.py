"""`trnsim instances`: the catalog's instances side by side, with derived totals."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import typer

from trnsim import hardware
from trnsim.cli.app import app, console
from trnsim.cli.format import gib, money, num
from trnsim.cli.tables import Column as TableColumn
from trnsim.cli.tables import print_table
from trnsim.errors import UnknownNameError
from trnsim.hardware import InstanceSpec
from trnsim.hardware.sources import describe


def _tflops(precision: str) -> Callable[[InstanceSpec], float | None]:
    def get(spec: InstanceSpec) -> float | None:
        peak = spec.peak_flops(precision)
        return None if peak is None else peak / 1e12
    return get


def _per_dollar(spec: InstanceSpec) -> float | None:
    value = spec.peak_flops_per_dollar_hour("bf16")
    return None if value is None else value / 1e12


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    get: Callable[[InstanceSpec], object]
    show: Callable[[object], str] = str
    drop: int = 0  # narrow terminals hide columns of higher rank first (cli.tables)


COLUMNS = (
    Column("instance", "instance", lambda s: s.name),
    Column("chip", "chip", lambda s: s.chip.name, drop=3),
    Column("chips", "chips", lambda s: s.chips),
    Column("cores", "NeuronCores", lambda s: s.neuron_cores),
    Column("memory", "device GiB", lambda s: s.device_memory_bytes, gib),
    Column("bandwidth", "mem GB/s", lambda s: s.device_memory_bytes_per_s,
           lambda v: num(v, 0, 1e9), drop=4),
    Column("fp8", "fp8 TFLOPS", _tflops("fp8"), lambda v: num(v, 0), drop=5),
    Column("bf16", "bf16 TFLOPS", _tflops("bf16"), lambda v: num(v, 0)),
    Column("fp32", "fp32 TFLOPS", _tflops("fp32"), lambda v: num(v, 1), drop=6),
    Column("neuronlink", "NeuronLink GB/s/chip", lambda s: s.neuronlink_bytes_per_s_per_chip,
           lambda v: num(v, 0, 1e9), drop=7),
    Column("efa", "EFA Gbps", lambda s: s.efa_bits_per_s, lambda v: num(v, 0, 1e9),
           drop=8),
    Column("price", "$/hour", lambda s: s.price_per_hour, money),
    Column("bf16_per_dollar", "bf16 TFLOPS per $/h", _per_dollar, lambda v: num(v, 1),
           drop=2),
)
_BY_KEY = {c.key: c for c in COLUMNS}


def _sorted(specs: list[InstanceSpec], sort: str | None) -> list[InstanceSpec]:
    if not sort:
        return specs
    descending = sort.startswith("-")
    key = sort.lstrip("-").lower()
    if key not in _BY_KEY:
        raise UnknownNameError("sort field", key, _BY_KEY)
    column = _BY_KEY[key]
    known = [s for s in specs if column.get(s) is not None]
    unknown = [s for s in specs if column.get(s) is None]
    return sorted(known, key=column.get, reverse=descending) + unknown


def _json_row(spec: InstanceSpec) -> dict:
    return {
        "instance": spec.name,
        "chip": spec.chip.name,
        "chips": spec.chips,
        "servers": spec.servers,
        "neuron_cores": spec.neuron_cores,
        "logical_neuron_cores": spec.logical_cores(),
        "vcpus": spec.vcpus,
        "host_memory_bytes": spec.host_memory_bytes,
        "device_memory_bytes": spec.device_memory_bytes,
        "device_memory_bytes_per_s": spec.device_memory_bytes_per_s,
        "peak_dense_tflops": {p: _tflops(p)(spec) for p in ("fp8", "bf16", "fp16", "tf32", "fp32")},
        "neuronlink_bytes_per_s_per_chip": spec.neuronlink_bytes_per_s_per_chip,
        "efa_bits_per_s": spec.efa_bits_per_s,
        "topology": spec.topology_kind,
        "price_per_hour": spec.price_per_hour,
        "bf16_tflops_per_dollar_hour": _per_dollar(spec),
    }


def _verbose_notes(specs: list[InstanceSpec]) -> list[str]:
    lines = []
    for spec in specs:
        parts = [spec, spec.chip, spec.chip.core]
        for part in parts:
            for alt in part.alternatives:
                lines.append(f"{spec.name}: {type(part).__name__}.{alt.field}: other source gives "
                             f"{alt.value:g} {alt.unit} ({describe(alt.source)}) {alt.note}")
        lines.append(f"{spec.name}: sources: " + "; ".join(
            f"{field}={describe(src)}" for field, src in spec.sources))
    return lines


@app.command("instances")
def instances_command(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    sort: str = typer.Option(None, "--sort", help="Sort by a column key (prefix '-' to reverse): "
                             + ", ".join(_BY_KEY)),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Also show figures other sources give, and every source."),
    wide: bool = typer.Option(False, "--wide", help="Show every column even if the terminal is "
                              "narrower."),
) -> None:
    """Compare instances: chips, cores, memory, peak TFLOPS, links, price."""
    specs = _sorted(list(hardware.INSTANCES), sort)
    if as_json:
        typer.echo(json.dumps([_json_row(s) for s in specs], indent=2))
        return
    out = console()
    print_table(out, [TableColumn(c.header, "left" if c.key in ("instance", "chip") else "right",
                                  c.drop) for c in COLUMNS],
                [[c.show(c.get(spec)) for c in COLUMNS] for spec in specs], wide=wide)
    out.print("Peaks are the architecture docs' dense figures (fp8: cFP8 on Trn1/Inf2/Trn2, "
              "MXFP8 on Trn3). '-' = not supported or not published.", highlight=False)
    if verbose:
        for line in _verbose_notes(specs):
            out.print(line, highlight=False, markup=False)
