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
