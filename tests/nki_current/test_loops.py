"""Dynamic loops: executed with register trip counts, not unrolled; timing-only when knowable."""

import numpy as np
import pytest

from tests.nki_current.kernels import loops
from trnsim.errors import InvalidArgumentError
from trnsim.isa import UnknownRegisterValue
from trnsim.nki import typing as nt
from trnsim.nki.current import Kernel
from trnsim.nki.current import language as nl


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_fori_loop_with_a_bound_loaded_from_device_memory(rng, target):
    x = rng.standard_normal((16, 32)).astype(np.float32)
    kernel = Kernel(loops.double_first_rows.fn, platform_target=target)
    for n in (0, 5, 16):
        got = kernel(x, np.array([[n]], dtype=np.int32))
        want = np.zeros_like(x)
        want[:n] = 2 * x[:n]
        np.testing.assert_array_equal(got, want)
    profile = kernel.last_run.profile
    program = profile.program
    # traced once: the body is 3 instructions in the program, executed 16 times
    assert sum(1 for ins in program.instructions if ins.name == "nisa.tensor_scalar") == 1
    executed = [r for r in profile.records if r.label == "nisa.tensor_scalar"]
    assert len(executed) == 16 and len({r.pc for r in executed}) == 1


def test_fori_loop_step_and_iterations_overlap(rng):
    x = rng.standard_normal((8, 64)).astype(np.float32)
    got = loops.exp_rows(x, 2)
    want = np.zeros_like(x)
    want[::2] = np.exp(x[::2])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_while_loop_counts_down_a_device_counter():
    for count in (1, 7):
        assert loops.countdown(np.array([[count]], dtype=np.int32))[0, 0] == 3.0 * count


def test_nested_dynamic_loops_with_register_bounds():
    assert loops.triangle(6)[0, 0] == 15  # 0 + 1 + ... + 5


def test_timing_only_run_of_a_constant_bound_loop_matches_the_functional_timeline(rng):
    placeholder = nt.tensor[[32, 128], nl.float32]
    loops.exp_rows.run((placeholder,), {}, mode="timing")
    timing = loops.exp_rows.last_run.profile
    loops.exp_rows(rng.standard_normal((32, 128)).astype(np.float32))
    functional = loops.exp_rows.last_run.profile
    np.testing.assert_array_equal(timing.start_ns, functional.start_ns)
    assert len(functional) > 32 * 3  # every iteration is simulated


def test_timing_only_run_cannot_know_a_bound_loaded_from_memory():
    placeholders = (nt.tensor[[16, 32], nl.float32], nt.tensor[[1, 1], nl.int32])
    with pytest.raises(UnknownRegisterValue, match=r"loaded from memory at loops\.py:\d+"):
        loops.double_first_rows.run(placeholders, {}, mode="timing")


def test_python_cannot_branch_on_a_register():
    from trnsim.nki.current import isa as nisa
    from trnsim.nki.current import jit

    @jit(platform_target="trn2")
    def bad(x):
        reg = nisa.register_alloc(3)
        if reg:
            pass
        return x

    with pytest.raises(InvalidArgumentError, match=r"nl\.while_loop"):
        bad(np.zeros((2, 2), np.float32))


def test_dynamic_loops_are_refused_inside_no_reorder():
    from trnsim.nki.current import jit

    @jit(platform_target="trn2")
    def bad(x):
        with nl.no_reorder():
            nl.fori_loop(0, 4, lambda i: None)
        return x

    with pytest.raises(InvalidArgumentError, match="no_reorder"):
        bad(np.zeros((2, 2), np.float32))
