"""`python -m trnsim.run script.py [args...]`: run a script with Neuron imports routed to trnsim.

TRNSIM_NEURONXCC=1 aliases `neuronxcc.nki`; TRNSIM_NKI=1 aliases `nki`. With neither set, both are
installed. `torch_xla` (its `core.xla_model`, `distributed.parallel_loader`,
`distributed.xla_backend`, `debug.metrics`, `runtime`) and `torch_neuronx` are served by
`trnsim.runtime.xla` when the script imports them: training scripts run on the simulated
device (TRNSIM_INSTANCE picks the instance, trn1.2xlarge by default). Data parallel:
`torchrun --nproc_per_node=N -m trnsim.run train.py`. pytest works too:
`python -m trnsim.run -m pytest tests/`.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys


def main(argv: list[str] | None = None) -> None:
    from trnsim.nki import compat
    from trnsim.runtime.xla import api as xla_api
    from trnsim.runtime.xla import tensorboard

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        raise SystemExit(2)
    legacy = os.environ.get("TRNSIM_NEURONXCC") == "1"
    current = os.environ.get("TRNSIM_NKI") == "1"
    if legacy or not current:
        compat.install("neuronxcc")
    if current or not legacy:
        with contextlib.suppress(ImportError):  # the current API front end is optional
            compat.install("nki")
    xla_api.install_on_import()
    tensorboard.install_on_import()  # the script's SummaryWriters also get trnsim's step figures
    # before any backward (autograd sizes its device queues once), at the script's import torch
    xla_api.register_device_on_import()
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
