"""`trnsim top`: neuron-top on the simulated machine, a live terminal UI (Textual) of every
trnsim process of this user: NeuronCore utilisation, vCPU, memory, loaded models, processes.

Keys: 1-9 one process, a all processes, left/right the previous/next process, i the next
simulated instance, f utilisation or TFLOP/s, q quit.
"""

from __future__ import annotations

from typing import ClassVar

import typer

from trnsim.cli.app import app
from trnsim.cli.monitor import default_instance, need_tools

DEFAULT_INTERVAL_S = 1.0


def build_app(interval_s: float, instance: str | None):
    """The Textual application (imported here: Textual is the `tools` extra's)."""
    import psutil
    from textual.app import App, ComposeResult
    from textual.binding import Binding
    from textual.containers import VerticalScroll
    from textual.widgets import Footer, Static

    from trnsim.cli import top_view as view
    from trnsim.runtime.registry import read_records
    from trnsim.runtime.registry.sample import Sampler

    class TopApp(App):
        TITLE = "trnsim top"
        CSS = "Static { width: auto; } #title { text-style: bold; }"
        BINDINGS: ClassVar[list] = [Binding("q", "quit", "quit"), Binding("a", "select(-1)", "all"),
                    Binding("left", "step(-1)", "previous"), Binding("right", "step(1)", "next"),
                    Binding("i", "next_instance", "instance"), Binding("f", "flops", "% / TFLOP/s"),
                    *[Binding(str(n), f"select({n - 1})", show=False) for n in range(1, 10)]]

        def __init__(self) -> None:
            super().__init__()
            self.sampler = Sampler()
            self.samples = []
            self.selected: int | None = None
            self.instance = instance
            self.show_flops = False
            psutil.cpu_times_percent()  # starts psutil's interval

        def compose(self) -> ComposeResult:
            with VerticalScroll():
                for name in ("title", "cores", "cpu", "memory", "models", "processes"):
                    yield Static(id=name)
            yield Footer()

        def on_mount(self) -> None:
            self.refresh_data()
            self.set_interval(interval_s, self.refresh_data)

        def refresh_data(self) -> None:
            self.samples = self.sampler(read_records())
            if self.instance is None or (self.samples and self.instance not in
                                         view.instances_of(self.samples)):
                self.instance = instance or default_instance([s.record for s in self.samples])
            self.redraw()

        def redraw(self) -> None:
            shown = self.samples
            if self.selected is not None:
                shown = self.samples[self.selected:self.selected + 1]
            cpu, memory = psutil.cpu_times_percent(), psutil.virtual_memory()
            host = view.HostSample(cpu.user, cpu.system, memory.total,
                                   memory.total - memory.available)
            self.query_one("#title", Static).update(view.title(self.samples, self.instance,
                                                               self.selected))
            self.query_one("#cores", Static).update(view.core_table(shown, self.instance,
                                                                    self.show_flops))
            self.query_one("#cpu", Static).update(view.cpu_table(shown, host))
            self.query_one("#memory", Static).update(view.memory_table(shown, self.instance, host))
            self.query_one("#models", Static).update(view.models_table(shown, self.instance))
            self.query_one("#processes", Static).update(view.process_table(self.samples,
                                                                           self.selected))

        def action_select(self, index: int) -> None:
            self.selected = None if index < 0 or index >= len(self.samples) else index
            self.redraw()

        def action_step(self, delta: int) -> None:
            if self.samples:
                current = -1 if self.selected is None else self.selected
                self.selected = (current + delta) % len(self.samples)
                self.redraw()

        def action_next_instance(self) -> None:
            known = view.instances_of(self.samples) or [self.instance]
            at = known.index(self.instance) if self.instance in known else -1
            self.instance = known[(at + 1) % len(known)]
            self.redraw()

        def action_flops(self) -> None:
            self.show_flops = not self.show_flops
            self.redraw()

    return TopApp()


@app.command("top")
def top_command(
    interval: float = typer.Option(DEFAULT_INTERVAL_S, "--interval", min=0.2,
                                   help="Seconds between refreshes."),
    instance: str = typer.Option(None, "--instance", help="The simulated instance shown first "
                                 "(default: the first registered process's; i cycles)."),
) -> None:
    """neuron-top: live NeuronCore, vCPU and memory use of every trnsim process (q quits)."""
    need_tools("textual", "psutil")
    if instance is not None:
        from trnsim import hardware

        instance = hardware.instance(instance).name
    build_app(interval, instance).run()
