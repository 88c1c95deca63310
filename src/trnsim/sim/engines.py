"""Small integer codes for the in-order streams of a core, and the names of their tracks.

The hot loop indexes lists by these codes instead of hashing `Engine` values. TensorE has two
pipelines (LoadStationary loads the next stationary tile while MultiplyMoving streams the
current one), so it has two codes and two profile tracks; each DMA queue is a track of its own.
Negative codes name a cause of waiting that is not another stream.
"""

from __future__ import annotations

from trnsim.isa import Engine

TENSOR_LOAD, TENSOR, VECTOR, SCALAR, GPSIMD, SYNC = range(6)
DMA_BASE = 6  # DMA queue q has code DMA_BASE + q
COMPUTE_STREAMS = ("tensor.load", "tensor", "vector", "scalar", "gpsimd", "sync")

# Why an instruction started later than its stream was free (besides a producer's code).
NO_WAIT = -1  # its stream was the last thing it waited for
PIPELINE = -2  # TensorE: its LoadStationary / the previous MultiplyMoving
PORT = -3  # an NC-v2 shared SBUF/PSUM port held by another engine
QUEUE = -4  # a DMA queue's earlier transfer, DMA engines or HBM bandwidth in use
PEER = -5  # a synchronising instruction waited for other NeuronCores (barrier, send/receive)
FABRIC = -6  # a collective waited for the collectives fabric
CAUSE_NAMES = {NO_WAIT: "in order", PIPELINE: "tensor pipeline", PORT: "shared port",
               QUEUE: "dma queue/bandwidth", PEER: "other cores", FABRIC: "collectives fabric"}

STREAM_OF_ENGINE = {Engine.TENSOR: TENSOR, Engine.VECTOR: VECTOR, Engine.SCALAR: SCALAR,
                    Engine.GPSIMD: GPSIMD, Engine.SYNC: SYNC}
ENGINE_OF_STREAM = {TENSOR_LOAD: "tensor", TENSOR: "tensor", VECTOR: "vector", SCALAR: "scalar",
                    GPSIMD: "gpsimd", SYNC: "sync"}


def stream_name(code: int) -> str:
    """Track name of a stream code: "tensor", "vector", ..., "dma.q3"."""
    if code >= DMA_BASE:
        return f"dma.q{code - DMA_BASE}"
    if code >= 0:
        return COMPUTE_STREAMS[code]
    return CAUSE_NAMES.get(code, "unknown")


def engine_name(code: int) -> str:
    """The engine a stream belongs to: TensorE's two pipelines are "tensor", DMA queues "dma"."""
    if code >= DMA_BASE:
        return "dma"
    return ENGINE_OF_STREAM.get(code, stream_name(code))
