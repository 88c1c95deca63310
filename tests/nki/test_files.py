"""Naming a user's kernel: FILE.py::KERNEL or module::KERNEL, and shape strings."""

import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.nki import Kernel
from trnsim.nki.files import load_kernel, parse_shapes


def test_shapes_in_argument_order_with_optional_dtypes():
    assert parse_shapes("128x512, 512x256", "float32") == [
        ((128, 512), "float32"), ((512, 256), "float32")]
    # a dtype after the last shape only is every shape's (it was silently the last one's)
    assert parse_shapes("128x512, 512x256:bfloat16", "float32") == [
        ((128, 512), "bfloat16"), ((512, 256), "bfloat16")]
    assert parse_shapes("128x512:float32,512x256:bfloat16", "int8") == [
        ((128, 512), "float32"), ((512, 256), "bfloat16")]


@pytest.mark.parametrize("text", ["128x512:bfloat16,512x256", "1x2:int8,3x4,5x6:float32"])
def test_some_but_not_all_dtypes_is_ambiguous(text):
    with pytest.raises(InvalidArgumentError, match="name one on every shape"):
        parse_shapes(text, "float32")


def test_a_module_kernel_and_a_file_next_to_a_base_directory(tmp_path, monkeypatch):
    assert isinstance(load_kernel("trnsim.kernels.tutorials::matmul_optimized"), Kernel)
    (tmp_path / "k.py").write_text("def plain(a):\n    return a\n")
    monkeypatch.chdir("/")
    assert isinstance(load_kernel("k.py::plain", tmp_path), Kernel)  # a plain function is jitted


@pytest.mark.parametrize("target,message", [
    ("k.py", "FILE.py::KERNEL or module::KERNEL"),
    ("::k", "FILE.py::KERNEL or module::KERNEL"),
    ("nowhere.py::k", "'nowhere.py' does not exist"),
    ("no_such_module_xyz::k", "cannot be imported"),
    ("trnsim.kernels.tutorials::nothing", "no kernel named 'nothing'"),
])
def test_bad_targets_say_what_is_wrong(target, message):
    with pytest.raises(InvalidArgumentError, match=message):
        load_kernel(target)


def test_bad_shapes_are_clear_errors():
    with pytest.raises(InvalidArgumentError, match="128xz"):
        parse_shapes("128xz", "float32")
    with pytest.raises(InvalidArgumentError, match="no input shapes"):
        parse_shapes(" , ", "float32")


def test_a_current_api_file_runs_and_numbers_match_numpy(tmp_path):
    """A kernel file written against the current API (`import nki`) loads as `trnsim kernel run`
    loads it, and computes what numpy does."""
    import numpy as np

    from trnsim.nki import compat

    (tmp_path / "cur.py").write_text(
        "import nki\nimport nki.language as nl\n\n"
        "@nki.jit\ndef add(a, b):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    zero = nl.zeros(a.shape, dtype=a.dtype)\n"  # the current API's own tensors
        "    nl.store(out, nl.add(nl.add(nl.load(a), nl.load(b)), zero))\n"
        "    return out\n")
    try:
        from trnsim import hardware
        from trnsim.nki.current import Kernel as CurrentKernel
        from trnsim.nki.typing import TensorSpec

        kernel = load_kernel("cur.py::add", tmp_path)
        assert isinstance(kernel, CurrentKernel)  # not re-wrapped in the legacy jit
        a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
        np.testing.assert_array_equal(np.asarray(kernel(a, a)), a + a)
        # what `trnsim kernel run --timing-only --target trn2` calls
        kernel.run([TensorSpec((128, 64), "float32")] * 2, {}, mode="timing",
                   target=hardware.core("trn2"))
        assert kernel.last_run.results[0].profile.core.name == "NeuronCore-v3"
    finally:
        compat.uninstall()


@pytest.mark.parametrize("body,message", [
    ("import not_a_package_xyz\n", r"bad\.py:1: .*ModuleNotFoundError.*not_a_package_xyz"),
    ("x = 1\ny = 1 / 0\n", r"bad\.py:2: .*ZeroDivisionError"),
    ("def f(:\n", r"bad\.py:1: .*SyntaxError"),
])
def test_a_failing_kernel_file_is_named_by_its_line(tmp_path, body, message):
    from trnsim.nki.compat import uninstall
    from trnsim.nki.files import KernelFileError

    (tmp_path / "bad.py").write_text(body)
    try:
        with pytest.raises(KernelFileError, match=message):
            load_kernel("bad.py::f", tmp_path)
    finally:
        uninstall()
