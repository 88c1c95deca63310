"""trnsim's current NKI API (the standalone `nki` package, versions 0.3 - 0.6).

`trnsim.nki.compat.install("nki")` (or ``TRNSIM_NKI=1 python -m trnsim.run script.py``) makes
`import nki`, `nki.language`, `nki.isa`, `nki.typing` and `nki.collectives` resolve here, so
unmodified kernels run. Layout:

- `kernel`: @nki.jit, ``kernel[lnc]`` launches, `nki.simulate`;
- `language` (nl), `isa` (nisa), `collectives` (ncc): the kernel-facing API;
- `tensor`: NkiTensor views; `trace`: the tracing machine's 0.3+ additions;
- `world`: launching a kernel on many ranks (`World`, `per_rank`; trnsim extensions).

Both NKI APIs are thin front ends over one machine: `trnsim.nki.trace` traces, the instructions
lower through `trnsim.nki.isa.lowering`, and `trnsim.sim` runs them.

What runs: every nisa instruction of nki 0.6 on the NeuronCore versions that have it (MX and
activate2/exponential/rand2 on gen4 only; sendrecv, core_barrier, nonzero_with_count,
range_select on gen3+); dynamic loops (`nl.fori_loop`, `nl.while_loop`, `nl.dynamic_range`)
executed by program counter with register trip counts; register-addressed operands
(``.ap(scalar_offset=...)``) and per-partition gather/scatter DMAs (``.ap(vector_offset=...)``);
LNC=2 launches; nki.collectives on simulated ranks. Unlike AWS's numerics-only simulator, runs
are timed, SBUF/PSUM capacity and hand-placed overlaps are checked, and collectives work.

Not implemented (each raises UnsupportedError naming itself): tensor indirection
(``NkiTensor.indirect``, NeuronCore-v4), ``rearrange``, 3-D/4-D and indirect dma_transpose,
nl.gather_flattened, all_gather_v / all_to_all_v / the implicit ring permutes, explicit
``NkiInstruction.depends_on`` edges; jax arrays. PE tiling (``tile_position``/``tile_size``) is
checked but timed as a full-array matmul; DMA QoS ``priority`` and ``dge_mode`` are accepted and
not modelled. trnsim has no device, so ``@nki.jit`` always simulates (``NKI_SIMULATOR=1``, which
reroutes AWS's @nki.jit to its CPU simulator, changes nothing).
"""

from trnsim.nki import typing
from trnsim.nki.api_boundary import module_getattr
from trnsim.nki.current import collectives, isa, language
from trnsim.nki.current.kernel import Kernel, jit, simulate
from trnsim.nki.current.world import World, per_rank

__getattr__ = module_getattr("nki", "legacy", __name__)

__all__ = ["Kernel", "World", "collectives", "isa", "jit", "language", "per_rank", "simulate",
           "typing"]
