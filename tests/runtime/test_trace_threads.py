"""trnsim.trace from several threads at once: each gets its own, correct compiled model."""

import threading

import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_three_threads_trace_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
    jobs = [(Mlp(w).eval(), torch.randn(2, w)) for w in (16, 32, 48)]
    start = threading.Barrier(len(jobs))
    results, errors = {}, []

    def work(index, model, x):
        start.wait()
        try:
            results[index] = trnsim.trace(model, (x,), instance="inf2.xlarge")(x)
        except Exception as error:  # reported below, with the thread's index
            errors.append((index, repr(error)))

    threads = [threading.Thread(target=work, args=(i, m, x)) for i, (m, x) in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    for index, (model, x) in enumerate(jobs):
        assert torch.allclose(results[index], model(x), atol=5e-2, rtol=5e-2)
