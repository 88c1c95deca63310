"""A real trnsim process for the live tools' tests: traces a small model, then calls it in a
loop (registering with the runtime registry) until stdin closes or MAX_SECONDS pass.

Run as `python registry_worker.py`; prints "ready <pid>" once the model has executed."""

import os
import sys
import threading
import time

import torch

import trnsim

MAX_SECONDS = 120.0  # bounded even if the test that started it dies


def main() -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16))
    example = torch.randn(8, 128)
    compiled = trnsim.trace(model, (example,), instance=os.environ.get("WORKER_INSTANCE", "inf2.xlarge"))
    compiled(example)
    print("ready", os.getpid(), flush=True)
    deadline = time.monotonic() + MAX_SECONDS
    while not stop.is_set() and time.monotonic() < deadline:
        compiled(example)


if __name__ == "__main__":
    main()
