"""The embedding engine's queue and batching with a stand-in encoder (no compile): rows are
packed `batch` to a compiled batch, and each request is charged every batch it rode in."""

import pytest

torch = pytest.importorskip("torch")

from trnsim.errors import InvalidArgumentError  # noqa: E402
from trnsim.perf.serving.embeddings import EmbeddingEngine, EmbeddingJob  # noqa: E402
from trnsim.perf.serving.engine import EngineStopped, QueueFull  # noqa: E402


class Encoder:
    """Vector of a row: [sum of its ids]; each compiled batch costs 5 ms."""

    batch, buckets = 2, (8,)

    def __init__(self):
        self.calls = []

    def warm(self):
        pass

    def latency_ms(self, bucket):
        return 5.0

    def __call__(self, rows):
        self.calls.append(len(rows))
        return torch.tensor([[float(sum(r))] for r in rows]), 5.0


def test_rows_are_packed_into_compiled_batches_and_each_request_pays_its_batches():
    encoder = Encoder()
    engine = EmbeddingEngine(encoder, queue_size=4, max_length=8)
    a, b = EmbeddingJob([[1, 2], [3]]), EmbeddingJob([[4], [5, 6]])
    c = EmbeddingJob([[7]])
    engine._generate([a, b, c])  # rows a0 a1 | b0 b1 | c0: three batches
    assert encoder.calls == [2, 2, 1]
    assert (a.vectors, b.vectors, c.vectors) == ([[3.0], [3.0]], [[4.0], [11.0]], [[7.0]])
    assert (a.device_ms, b.device_ms, c.device_ms) == (5.0, 5.0, 5.0)
    d = EmbeddingJob([[1], [2]])
    e = EmbeddingJob([[3]])
    engine._generate([e, d])  # e0 d0 | d1: d rides both batches
    assert (e.device_ms, d.device_ms) == (5.0, 10.0)


def test_limits_queue_and_shutdown():
    engine = EmbeddingEngine(Encoder(), queue_size=1, max_length=8)
    with pytest.raises(InvalidArgumentError, match="compiled length 8"):
        engine.submit(EmbeddingJob([[1] * 9]))
    with pytest.raises(InvalidArgumentError, match="batch of 2"):
        engine.submit(EmbeddingJob([[1], [2], [3]]))
    with pytest.raises(InvalidArgumentError, match="at least one token"):
        engine.submit(EmbeddingJob([[]]))
    engine.submit(EmbeddingJob([[1]]))  # the worker is not started: it waits in the queue
    with pytest.raises(QueueFull):
        engine.submit(EmbeddingJob([[2]]))
    engine.stop()
    with pytest.raises(EngineStopped):
        engine.submit(EmbeddingJob([[3]]))
