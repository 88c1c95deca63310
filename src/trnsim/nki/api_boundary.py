"""The line between the two NKI APIs: symbols of one used through the other, and target limits.

Kernels are ported between `neuronxcc.nki` (legacy, NKI 0.1) and `nki` (0.3 - 0.6) by hand, so a
symbol from the wrong API is a common mistake. Each front end's modules raise `ApiMismatchError`
for the other API's names (module ``__getattr__``) and keywords, saying which API the symbol
belongs to and what replaces it, instead of an AttributeError or a silent misreading.
"""

from __future__ import annotations

from collections.abc import Callable

from trnsim.errors import InvalidArgumentError, UnsupportedError

LEGACY = "the legacy neuronxcc.nki API"
CURRENT = "the current nki API (0.3+)"

_SLICING = "tensor slicing (t[0:128, 64:128], nl.ds(start, size)) or t.ap([[stride, size], ...])"

# Legacy-only symbols, by their qualified name, and what replaces them in nki 0.3+.
LEGACY_ONLY: dict[str, str] = {
    "nl.arange": _SLICING,
    "nl.mgrid": _SLICING,
    "nl.par_dim": "plain shapes: dim 0 of an on-chip tensor is the partition dimension",
    "nl.spmd_dim": "kernel[lnc](...) to launch on logical NeuronCores",
    "nl.nc": "kernel[lnc](...) to launch on logical NeuronCores",
    "nl.loop_reduce": "an explicit accumulation into an SBUF/PSUM tensor",
    "nl.all_reduce": "nki.collectives.all_reduce(srcs=[...], dsts=[...], replica_group=..., op=...)",
    "nl.fp32": "numeric constants, e.g. float(np.finfo(np.float32).min)",
    "nl.bfp16": "numeric constants, e.g. float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)",
    "nki.simulate_kernel": "nki.simulate(kernel)(*numpy_arrays)",
    "nki.benchmark": "a trnsim run's profile (kernel.last_run.profile) or timing-only nt.tensor "
                     "placeholders",
    "nki.baremetal": "calling the @nki.jit kernel with numpy arrays",
    "nki.profile": "kernel.last_run.profile.to_perfetto(path)",
    "nki.compiler": "nl.ndarray(..., address=(partition, offset)) for manual placement",
    "nisa.tensor_copy_dynamic_src": "nisa.tensor_copy(dst, src.ap(..., scalar_offset=reg))",
    "nisa.tensor_copy_dynamic_dst": "nisa.tensor_copy(dst.ap(..., scalar_offset=reg), src)",
    "nisa.builtin_custom_op": "nothing (custom ops are not part of nki 0.3+)",
    "mask=": "slicing the operands to the region to compute (t[0:64, 32:64])",
}

# Current-only symbols and what the legacy API offers instead.
CURRENT_ONLY: dict[str, str] = {
    "nl.fori_loop": "Python loops (nl.sequential_range), which the tracer unrolls",
    "nl.while_loop": "Python loops over compile-time trip counts",
    "nl.dynamic_range": "nl.sequential_range (unrolled)",
    "nl.no_reorder": "ncc.no_reorder() from neuronxcc.nki.compiler",
    "nl.is_hbm": "comparing tensor.buffer with nl.hbm / nl.shared_hbm",
    "nl.is_sbuf": "comparing tensor.buffer with nl.sbuf",
    "nl.is_psum": "comparing tensor.buffer with nl.psum",
    "nl.is_on_chip": "comparing tensor.buffer with nl.sbuf / nl.psum",
    "nl.float8_e5m2_x4": "nothing: MX types exist only for nc_matmul_mx in nki 0.3+ on gen4",
    "nl.float8_e4m3fn_x4": "nothing: MX types exist only for nc_matmul_mx in nki 0.3+ on gen4",
    "nl.float4_e2m1fn_x4": "nothing: MX types exist only for nc_matmul_mx in nki 0.3+ on gen4",
    "nisa.register_alloc": "compile-time Python integers",
    "nisa.register_move": "compile-time Python integers",
    "nisa.register_load": "compile-time Python integers",
    "nisa.register_store": "compile-time Python integers",
    "nisa.nc_matmul_mx": "nothing: MX matmul needs nki 0.3+ on NeuronCore-v4",
    "nisa.quantize_mx": "nothing: MX quantisation needs nki 0.3+ on NeuronCore-v4",
    "nisa.sendrecv": "shared-HBM tensors written by each core (kernel[nl.nc(2)])",
    "nisa.core_barrier": "separate kernel launches",
    "nisa.activate2": "nisa.activation followed by nisa.tensor_scalar",
    "nisa.exponential": "nisa.activation(op=nl.exp, bias=-max)",
    "nisa.dma_compute": "nisa.dma_copy(dst_rmw_op=np.add)",
    "nisa.nc_n_gather": "nisa.local_gather",
    "nisa.rng": "nl.rand",
    "nisa.rand2": "nl.rand",
    "nisa.set_rng_seed": "nl.random_seed",
    "nisa.rand_set_state": "nl.random_seed",
    "nisa.rand_get_state": "nothing",
    "nisa.nonzero_with_count": "nothing",
    "nisa.topk": "nisa.max8 / nisa.nc_match_replace8",
    "nisa.dma_engine": "nothing (one DMA path)",
    "nki.simulate": "nki.simulate_kernel(kernel, *numpy_arrays)",
    "nki.collectives": "nothing: collectives need nki 0.3+ (nki.collectives)",
    "dst=": "the returned tile: t = nisa.<op>(...) (legacy calls return their result)",
}


class ApiMismatchError(InvalidArgumentError):
    """A symbol or keyword of one NKI API used through the other; names its API and its
    replacement."""


def legacy_symbol(name: str) -> ApiMismatchError:
    """`name` (e.g. "nl.mgrid") belongs to the legacy API and was used through the current one."""
    replacement = LEGACY_ONLY.get(name, "the nki 0.3+ documentation's equivalent")
    return ApiMismatchError(f"{name} belongs to {LEGACY}; in nki 0.3+ use {replacement}")


def current_symbol(name: str) -> ApiMismatchError:
    """`name` belongs to the current API and was used through neuronxcc.nki."""
    replacement = CURRENT_ONLY.get(name, "the neuronxcc.nki documentation's equivalent")
    return ApiMismatchError(f"{name} belongs to {CURRENT}; in neuronxcc.nki use {replacement}")


def current_only_keyword(call: str, keyword: str) -> ApiMismatchError:
    return ApiMismatchError(f"{call}({keyword}=...) is the form of {CURRENT}; in neuronxcc.nki "
                            f"use {CURRENT_ONLY.get(keyword + '=', 'the legacy signature')}")


def legacy_only_keyword(call: str, keyword: str) -> ApiMismatchError:
    return ApiMismatchError(f"{call}({keyword}=...) is the form of {LEGACY}; in nki 0.3+ use "
                            f"{LEGACY_ONLY.get(keyword + '=', 'the documented signature')}")


def module_getattr(prefix: str, foreign: str, module: str) -> Callable[[str], object]:
    """A module ``__getattr__``: names of the other API raise ApiMismatchError, others the usual
    AttributeError. `prefix` is how users spell the module ("nl", "nisa", "nki"); `foreign` is
    "legacy" for a current-API module (foreign names are legacy ones) or "current"."""
    table = LEGACY_ONLY if foreign == "legacy" else CURRENT_ONLY
    make = legacy_symbol if foreign == "legacy" else current_symbol

    def __getattr__(name: str):
        qualified = f"{prefix}.{name}"
        if qualified in table:
            raise make(qualified)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__


def require_version(core, minimum: int, call: str) -> None:
    """Raise if an instruction needs a newer NeuronCore than the target (names both)."""
    if core.version < minimum:
        raise UnsupportedError(
            f"{call} needs NeuronCore-v{minimum} (gen{minimum}, {_TARGETS.get(minimum, '?')}) or "
            f"newer; the target is {core.name} (gen{core.version}, "
            f"{_TARGETS.get(core.version, '?')}); set NEURON_PLATFORM_TARGET_OVERRIDE or "
            f"platform_target")


_TARGETS = {2: "trn1/inf2", 3: "trn2", 4: "trn3"}
