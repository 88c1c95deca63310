"""`trnsim monitor [-c config.json] [--prometheus-port N]`: neuron-monitor on the simulated
machine. One JSON report per period on stdout (neuron-monitor's schema, see docs/monitor.md), or
the same figures as Prometheus metrics under AWS's exporter names."""

from __future__ import annotations

import json
import os
import sys
import time

import typer

from trnsim.cli.app import app, err_console
from trnsim.errors import InvalidArgumentError

TOOLS_HINT = "pip install 'trnsim[tools]'"


def need_tools(*modules: str) -> None:
    """Check the `tools` extra before doing any work."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise InvalidArgumentError(f"this command needs {', '.join(missing)}: {TOOLS_HINT}")


def default_instance(records: list[dict]) -> str:
    """$TRNSIM_INSTANCE, else the instance the first registered process uses, else trn1.2xlarge."""
    from trnsim.cli.ls import DEFAULT_INSTANCE

    if os.environ.get("TRNSIM_INSTANCE"):
        return os.environ["TRNSIM_INSTANCE"]
    for record in records:
        for core in record["cores"]:
            return core["instance"]
    return DEFAULT_INSTANCE


@app.command("monitor")
def monitor_command(
    config: str = typer.Option(None, "-c", "--config-file", help="A neuron-monitor JSON "
                               "configuration (period, neuron_runtimes, system_metrics)."),
    instance: str = typer.Option(None, "--instance", help="The simulated instance reported on "
                                 "(default $TRNSIM_INSTANCE, else the first registered "
                                 "process's)."),
    prometheus_port: int = typer.Option(None, "--prometheus-port", min=1, max=65535,
                                        help="Serve the reports as Prometheus metrics on "
                                        "127.0.0.1:PORT/metrics instead of printing them."),
    count: int = typer.Option(None, "--count", min=1, help="Stop after this many reports "
                              "(default: run until interrupted)."),
) -> None:
    """neuron-monitor: a JSON report of every registered trnsim process each period."""
    from trnsim.cli.monitor_report import Monitor, SystemSampler, default_config, read_config
    from trnsim.runtime.registry import read_records

    need_tools("psutil", *(["prometheus_client"] if prometheus_port else []))
    settings = read_config(config) if config else default_config()
    records = read_records()
    from trnsim import hardware

    monitor = Monitor(settings, hardware.instance(instance or default_instance(records)).name,
                      SystemSampler())
    collector = server = None
    if prometheus_port:
        from trnsim.cli.prometheus import ReportCollector, serve

        collector = ReportCollector()
        server = serve(collector, prometheus_port)
        err_console().print(f"trnsim monitor: Prometheus metrics on "
                            f"http://127.0.0.1:{prometheus_port}/metrics", highlight=False)
    reports = 0
    next_at = time.monotonic()
    try:
        while count is None or reports < count:
            report = monitor.report(records)
            if collector is not None:
                collector.update(report)
            else:
                sys.stdout.write(json.dumps(report) + "\n")
                sys.stdout.flush()
            reports += 1
            if count is not None and reports >= count:
                break
            next_at += settings.tick_s
            time.sleep(max(next_at - time.monotonic(), 0.0))
            records = read_records()
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # the reader went away (| head)
        sys.stderr.close()
    finally:
        if server is not None:
            server.shutdown()
