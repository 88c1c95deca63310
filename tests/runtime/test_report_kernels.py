"""The report's per-kernel figures (grouped with sorts and runs of labels) equal a plain
per-record accumulation (`np.*.at` over every instruction) exactly, on a traced model."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
from trnsim.runtime.report import kernel_times  # noqa: E402
from trnsim.sim.engines import DMA_BASE, engine_name  # noqa: E402
from trnsim.sim.profile import Profile  # noqa: E402


def _reference(profile) -> list[tuple]:
    codes: dict[str, int] = {}
    by_pc = np.array([codes.setdefault(i.label, len(codes)) for i in profile.program.instructions])
    kernel = by_pc[profile.pcs if profile.pcs is not None else np.arange(len(profile))]
    count = len(codes)
    is_tensor = np.array([engine_name(int(c)) == "tensor" for c in profile.stream], dtype=bool)
    is_dma = profile.stream >= DMA_BASE
    first = np.full(count, len(kernel))
    np.minimum.at(first, kernel, np.arange(len(kernel)))
    start, end = np.full(count, np.inf), np.full(count, -np.inf)
    np.minimum.at(start, kernel, profile.start_ns)
    np.maximum.at(end, kernel, profile.done_ns)
    dma_bytes, flops = np.zeros(count, np.int64), np.zeros(count, np.int64)
    np.add.at(dma_bytes, kernel[is_dma], np.asarray(profile.nbytes, np.int64)[is_dma])
    np.add.at(flops, kernel, np.asarray(profile.flops, np.int64))
    busy = np.bincount(kernel[is_tensor], weights=(profile.end_ns - profile.start_ns)[is_tensor],
                       minlength=count)
    names = list(codes)
    return [(names[k], int(np.sum(kernel == k)), float(start[k]), float(end[k]), float(busy[k]),
             int(dma_bytes[k]), int(flops[k])) for k in np.argsort(first, kind="stable")
            if np.any(kernel == k)]


def _got(profile) -> list[tuple]:
    return [(k.label, k.instructions, k.start_ns, k.end_ns, k.tensor_busy_ns, k.dma_bytes,
             k.flops) for k in kernel_times(profile)]


def test_kernel_times_equal_a_per_record_accumulation(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 128), torch.nn.LayerNorm(128)).eval()
    profile = trnsim.trace(model, (torch.randn(4, 32, 128),), instance="inf2.xlarge").timing()
    got = _got(profile)
    assert len(got) > 2 and got == _reference(profile)


class _Records(Profile):
    """A profile's columns for a program run by program counter: loops revisit kernels, so a
    kernel's records come in several runs, and one instruction is never reached."""

    def __init__(self, rng, labels: list[str], records: int) -> None:
        self.program = SimpleNamespace(instructions=[SimpleNamespace(label=label, source=None)
                                                     for label in labels], repeats=None)
        self.pcs = np.sort(rng.integers(0, len(labels) - 1, records))[::-1].copy()
        self.stream = rng.choice([0, 1, 2, DMA_BASE, DMA_BASE + 3], records).astype(np.int32)
        self.start_ns = rng.uniform(0, 1e6, records)
        self.end_ns = self.start_ns + rng.uniform(0, 1e3, records)
        self.done_ns = self.end_ns + rng.uniform(0, 1e2, records)
        self.nbytes = rng.integers(0, 1 << 40, records)
        self.flops = rng.integers(0, 1 << 50, records)

    def __len__(self) -> int:
        return len(self.pcs)


def test_kernel_times_with_a_program_counter_equal_the_accumulation():
    rng = np.random.default_rng(3)
    for _ in range(20):
        labels = [f"k.op:{int(v)}" for v in rng.integers(0, 5, int(rng.integers(2, 30)))]
        profile = _Records(rng, labels, int(rng.integers(0, 400)))
        assert _got(profile) == _reference(profile)
