"""`trnsim ls`: what neuron-ls prints on a simulated instance."""

from __future__ import annotations

import json
import os

import typer
from rich import box
from rich.table import Table

from trnsim import hardware
from trnsim.cli.app import app, console
from trnsim.hardware.devices import NeuronDevice, devices, resolve_lnc
from trnsim.hardware.topology import Topology

DEFAULT_INSTANCE = "trn1.2xlarge"


def _id_range(ids: tuple[int, ...]) -> str:
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"


def _json_rows(devs: list[NeuronDevice]) -> list[dict]:
    return [{
        "neuron_device": d.index,
        "connected_to": list(d.connected_to),
        "nc_count": d.nc_count,
        "logical_neuroncore_config": d.logical_neuroncore_config,
        "memory_size": d.memory_bytes,
        "neuroncore_ids": list(d.neuroncore_ids),
        "neuron_processes": [],
    } for d in devs]


def _table(devs: list[NeuronDevice]) -> Table:
    table = Table(box=box.ASCII, show_lines=False)
    for header in ("NEURON\nDEVICE", "NEURON\nCORES", "NEURON\nCORE IDS", "NEURON\nMEMORY",
                   "CONNECTED\nDEVICES"):
        table.add_column(header, justify="center")
    for d in devs:
        table.add_row(str(d.index), str(d.nc_count), _id_range(d.neuroncore_ids),
                      f"{d.memory_bytes // 1024**3} GB",
                      ", ".join(str(c) for c in d.connected_to))
    return table


def _torus_text(rows: int, cols: int, offset: int = 0) -> list[str]:
    cell = [f"[{offset + r * cols + c:>2}]" for r in range(rows) for c in range(cols)]
    centres = [4 + 8 * c + 2 for c in range(cols)]

    def marks(ch: str) -> str:
        line = [" "] * (8 * cols + 4)
        for x in centres:
            line[x] = ch
        return "".join(line).rstrip()

    lines = [marks("*"), marks("▼")]
    for r in range(rows):
        lines.append("*––►" + "◄––►".join(cell[r * cols:(r + 1) * cols]) + "◄––*")
        lines += [marks("▲"), marks("▼")] if r < rows - 1 else [marks("▲"), marks("*")]
    return lines


def topology_text(topology: Topology) -> str:
    if topology.kind == "single":
        return f"{topology.chips} device(s), no NeuronLink between devices"
    if topology.kind == "ring":
        cells = "◄––►".join(f"[{i}]" for i in range(topology.chips))
        return f"ring of {topology.chips} devices (the last links back to the first):\n*––►{cells}◄––*"
    if topology.grid is not None:
        rows, cols = topology.grid
        lines: list[str] = []
        for server in range(topology.servers):
            if topology.servers > 1:
                lines.append(f"server {server}:")
            lines += _torus_text(rows, cols, server * rows * cols)
        if topology.kind == "ultraserver":
            lines.append(f"UltraServer links: device d of server s ◄––► device d of servers s±1 "
                         f"(mod {topology.servers})")
        return "\n".join(lines)
    return (f"switched fabric: {topology.chips} devices in {topology.servers} servers; "
            f"each device links to its server switch and to the spine")


@app.command("ls")
def ls_command(
    instance: str = typer.Option(None, "--instance", "-i",
                                 help="Instance type (default: $TRNSIM_INSTANCE, else trn1.2xlarge)."),
    lnc: int = typer.Option(None, "--lnc", help="Logical NeuronCore config (1 or 2; trn2/trn3)."),
    as_json: bool = typer.Option(False, "--json", "-j", help="neuron-ls -j JSON output."),
    show_topology: bool = typer.Option(False, "--topology", "-t", help="Draw the device topology."),
) -> None:
    """List the Neuron devices of an instance, as neuron-ls does."""
    from trnsim.cli import checks

    checks.instance_given(instance)
    name = instance or os.environ.get("TRNSIM_INSTANCE") or DEFAULT_INSTANCE
    spec = hardware.instance(name)
    lnc_used = resolve_lnc(spec, lnc)
    devs = devices(spec, lnc_used)
    if as_json:
        typer.echo(json.dumps(_json_rows(devs), indent=2))
        return
    out = console()
    out.print(f"instance-type: {spec.name}", highlight=False)
    out.print("instance-id: trnsim-simulated", highlight=False)
    if len(spec.chip.lnc_options) > 1:
        out.print(f"logical-neuroncore-config: {lnc_used}", highlight=False)
    out.print(_table(devs))
    if show_topology:
        out.print(topology_text(spec.topology), highlight=False, markup=False)
