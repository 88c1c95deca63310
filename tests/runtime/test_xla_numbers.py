"""Numbers of trnsim's compiled training kernels: each cut graph run functionally on the
instruction-level simulator (`trnsim.runtime.xla.functional`), against `torch.autograd` and
`torch.optim` on CPU. The lazy device hands scripts PyTorch's values, so only these tests see
a backward or optimizer kernel that computes the wrong number. Scripts run in their own process
(see test_xla.py); `--auto-cast none` keeps fp32 matmuls fp32 (neuronx-cc's default casts them
to bf16, checked apart)."""

import pytest

from tests.runtime.test_xla import SCRIPTS, run_script

torch = pytest.importorskip("torch")

FP32 = {"NEURON_CC_FLAGS": "--auto-cast none", "TRNSIM_XLA_TIMING": "off"}
FAMILIES = ["linear", "matmul", "bmm", "elementwise", "gelu", "gelu_tanh", "tanh", "silu",
            "softmax", "log_softmax", "layer_norm", "embedding", "cross_entropy", "attention",
            "rms_norm", "sdpa", "sdpa_full", "sdpa_grouped", "sdpa_gqa", "reductions", "reshapes", "dropout",
            "conv_patch", "conv_strided", "conv_dilated", "conv_grouped", "conv_depthwise",
            "conv_over_padded", "conv1d", "conv_frozen_input", "layer_norm_frozen_input"]


@pytest.fixture(scope="module")
def backward(tmp_path_factory):
    return run_script(tmp_path_factory.mktemp("backward"), str(SCRIPTS / "backward_families.py"),
                      **FP32)


@pytest.mark.parametrize("family", FAMILIES)
def test_backward_matches_autograd_in_fp32(backward, family):
    error = backward[family]
    assert isinstance(error, float), error  # a string is the exception the family raised
    assert error < 1e-5


def test_default_auto_cast_computes_matmul_gradients_in_bf16(tmp_path):
    errors = run_script(tmp_path, str(SCRIPTS / "backward_families.py"), "linear", "gelu",
                        "conv_patch", "conv_strided", "sdpa_full", TRNSIM_XLA_TIMING="off")
    for family in ("linear", "conv_patch", "conv_strided", "sdpa_full"):
        # bf16 operands (8 mantissa bits), fp32 accumulation
        assert 1e-5 < errors[family] < 2e-2, (family, errors[family])
    assert errors["gelu"] < 1e-5  # no matmul: fp32 throughout


def test_optimizers_match_torch_optim_after_several_steps(tmp_path):
    result = run_script(tmp_path, str(SCRIPTS / "optimizers.py"), TRNSIM_XLA_VALUES="simulated",
                        **FP32)
    assert set(result) == {"sgd_momentum", "sgd_nesterov", "adam", "adamw", "adamw_amsgrad"}
    for name, row in result.items():
        assert row["moved"] > 1e-2, name  # the parameters did move
        assert row["error"] < 1e-5, (name, row)


@pytest.mark.parametrize("flag", ["XLA_USE_BF16", "XLA_DOWNCAST_BF16"])
def test_downcast_flags_store_decomposition_intermediates_as_bf16(tmp_path, flag):
    result = run_script(tmp_path, str(SCRIPTS / "bf16_intermediates.py"), TRNSIM_XLA_TIMING="off",
                        **{flag: "1"})
    assert result["script_dtype"] == "torch.float32"  # the script still sees float32
    # layer norm / GELU / softmax backward upcast to float32 in PyTorch's decompositions
    assert result["dtypes"] == ["bfloat16"], result["float32_from"]
    exact = 1 + 2**-20 + 2**-40
    if flag == "XLA_USE_BF16":  # float64 is bf16 too
        assert result["double_graph_dtypes"] == ["bfloat16"]
        assert result["double_values"] == [1.0, 2.0]
    else:  # float64 is float32
        assert result["double_graph_dtypes"] == ["float32"]
        assert result["double_values"] == [1 + 2**-20, 2 + 2**-19] != [exact, 2 * exact]
