"""What `trnsim top` draws, as rich renderables built from registry samples (no terminal needed,
so the figures are testable apart from the TUI). neuron-top's sections: NeuronCore utilisation,
vCPU utilisation, memory usage summary, memory usage details (loaded models), plus a process list.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

from trnsim import hardware
from trnsim.runtime.registry.sample import ProcessSample

BAR_CELLS = 20
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


@dataclass
class HostSample:
    """The host's figures for the vCPU and memory sections."""

    cpu_user_percent: float
    cpu_system_percent: float
    memory_total_bytes: int
    memory_used_bytes: int


def bar(fraction: float, cells: int = BAR_CELLS) -> Text:
    fraction = min(max(fraction, 0.0), 1.0)
    full = round(fraction * cells)
    text = Text("█" * full, style="green" if fraction < 0.8 else "yellow")
    text.append("░" * (cells - full), style="dim")
    text.append(f" {100 * fraction:5.1f}%")
    return text


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def instances_of(samples: list[ProcessSample]) -> list[str]:
    return sorted({c.instance for s in samples for c in s.cores}
                  | {m["instance"] for s in samples for m in s.record["models"]})


def title(samples: list[ProcessSample], instance: str, selected: int | None) -> str:
    tab = "all processes" if selected is None else f"process {selected + 1}"
    if selected is not None and selected < len(samples):
        tab += f" (pid {samples[selected].pid})"
    return f"trnsim top — {instance} (simulated) — {tab} — {len(samples)} process(es)"


def core_table(samples: list[ProcessSample], instance: str, flops: bool) -> Table:
    """One row per NeuronCore of the instance: utilisation (or TFLOP/s) and each engine's share
    of its execution time; cores no process holds are shown idle."""
    spec = hardware.instance(instance)
    table = Table(title=f"NeuronCore {spec.chip.core.monitor_version} Utilization", box=box.SIMPLE,
                  title_justify="left", expand=False)
    table.add_column("NC", justify="right")
    table.add_column("TFLOP/s (simulated)" if flops else "utilisation")
    for engine in ENGINES:
        table.add_column(engine, justify="right")
    table.add_column("exec", justify="right")
    table.add_column("HBM", justify="right")
    table.add_column("pid", justify="right")
    by_core = {}
    for s in samples:
        for c in s.cores:
            if c.instance == instance:
                by_core.setdefault(c.core, []).append((s, c))
    cores = spec.logical_cores(None)
    for core in range(max(cores, max(by_core, default=-1) + 1)):
        held = by_core.get(core, [])
        if not held:
            table.add_row(str(core), Text("idle", style="dim"), *[""] * len(ENGINES), "", "", "")
            continue
        util = min(sum(c.utilisation for _, c in held), 1.0)
        rate = sum(c.flops_per_s for _, c in held)
        engines = [max((c.engine_utilisation.get(e, 0.0) for _, c in held), default=0.0)
                   for e in ENGINES]
        table.add_row(str(core), Text(f"{rate / 1e12:8.3f}") if flops else bar(util),
                      *[f"{100 * u:.0f}%" for u in engines],
                      str(sum(c.executions for _, c in held)),
                      _bytes(sum(sum(c.hbm_bytes.values()) for _, c in held)),
                      ",".join(str(s.pid) for s, _ in held))
    return table


def cpu_table(samples: list[ProcessSample], host: HostSample) -> Table:
    table = Table(title="vCPU Utilization", box=box.SIMPLE, title_justify="left")
    table.add_column("")
    table.add_column("user", justify="right")
    table.add_column("system", justify="right")
    table.add_row("system", f"{host.cpu_user_percent:.1f}%", f"{host.cpu_system_percent:.1f}%")
    table.add_row("runtime", f"{sum(s.vcpu_percent.get('user', 0) for s in samples):.1f}%",
                  f"{sum(s.vcpu_percent.get('system', 0) for s in samples):.1f}%")
    return table


def memory_table(samples: list[ProcessSample], instance: str, host: HostSample) -> Table:
    """neuron-top's summary: the host (used / total, the processes' resident memory) and the
    instance's device memory by neuron-monitor's kinds."""
    kinds = ("constants", "tensors", "model_code", "runtime_memory", "model_shared_scratchpad")
    table = Table(title="Memory Usage Summary", box=box.SIMPLE, title_justify="left")
    for header in ("", "used / total", *(k.replace("_", " ") for k in kinds), "app. memory"):
        table.add_column(header, justify="left" if not header else "right")
    table.add_row("host", f"{_bytes(host.memory_used_bytes)} / {_bytes(host.memory_total_bytes)}",
                  *[""] * len(kinds), _bytes(sum(s.record["host_memory_bytes"] for s in samples)))
    device: dict[str, int] = {}
    for s in samples:
        for c in s.cores:
            if c.instance == instance:
                for kind, n in c.hbm_bytes.items():
                    device[kind] = device.get(kind, 0) + n
    spec = hardware.instance(instance)
    table.add_row("device", f"{_bytes(sum(device.values()))} / {_bytes(spec.chips * spec.chip.memory_bytes)}",
                  *[_bytes(device.get(k, 0)) for k in kinds], "")
    return table


def models_table(samples: list[ProcessSample], instance: str) -> Table:
    table = Table(title="Memory Usage Details (loaded models)", box=box.SIMPLE, title_justify="left")
    for header in ("pid", "model id", "name", "kind", "cores", "device memory", "executions"):
        table.add_column(header, justify="right" if header in ("pid", "model id", "executions")
                         else "left")
    for s in samples:
        for model in s.record["models"]:
            if model["instance"] != instance:
                continue
            device = sum(sum(kinds.values()) for kinds in model["hbm"].values())
            table.add_row(str(s.pid), str(model["model_id"]), model["name"], model["kind"],
                          ",".join(map(str, model["cores"])), _bytes(device),
                          str(model["executions"]))
    return table


def process_table(samples: list[ProcessSample], selected: int | None) -> Table:
    table = Table(title="Processes (1-9 select, a all)", box=box.SIMPLE, title_justify="left")
    for header in ("#", "pid", "tag", "cores", "executions", "errors", "p50 latency", "command"):
        table.add_column(header)
    for i, s in enumerate(samples):
        cores = ", ".join(f"{c.instance}:{c.core}" for c in s.cores)
        p50 = s.total_latency_s["p50"] if s.total_latency_s else None
        style = "reverse" if selected == i else ""
        table.add_row(str(i + 1), str(s.pid), s.tag, cores,
                      str(sum(s.record["execution_status"].values())),
                      str(sum(s.record["errors"].values())),
                      f"{p50 * 1e3:.2f} ms" if p50 is not None else "-",
                      s.record["command"][:60], style=style)
    return table
