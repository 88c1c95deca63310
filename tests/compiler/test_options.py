"""NEURON_CC_FLAGS and trace keyword options: parsing, precedence, and errors."""

import pytest

from trnsim.compiler.options import CompileOptions, options_from_env, parse_cc_flags
from trnsim.errors import InvalidArgumentError


def test_defaults_are_neuronx_cc_defaults():
    o = options_from_env({})
    assert (o.auto_cast, o.auto_cast_type, o.instance) == ("matmult", "bf16", "inf2.xlarge")
    assert o.spec.name == "inf2.xlarge"  # the resolved instance travels with the options
    assert o.cast_dtype == "bfloat16"


def test_inf1_defaults_to_neuron_cc_casting_every_fp32_operator():
    assert options_from_env({}, instance="inf1.xlarge").auto_cast == "all"
    assert options_from_env({}, instance="inf1.6xlarge", auto_cast="matmult").auto_cast == "matmult"
    assert options_from_env({}, instance="trn1.2xlarge").auto_cast == "matmult"


def test_model_type_defaults_per_compiler_and_neuron_cc_has_none():
    """neuronx-cc as torch-neuronx runs it: transformer; neuron-cc (inf1) has no --model-type
    and no fused attention: generic, and a transformer asked of it is listed as ignored."""
    assert options_from_env({}, instance="inf2.xlarge").model_type == "transformer"
    assert options_from_env({}, instance="trn1.2xlarge", model_type="generic").fuses_attention \
        is False
    inf1 = options_from_env({}, instance="inf1.xlarge")
    assert (inf1.model_type, inf1.fuses_attention, inf1.ignored_flags) == ("generic", False, ())
    asked = options_from_env({}, instance="inf1.xlarge", model_type="transformer")
    assert asked.model_type == "generic"
    assert any("--model-type=transformer" in f for f in asked.ignored_flags)


@pytest.mark.parametrize("text,expected", [
    ("--fast-math all", {"auto_cast": "all", "auto_cast_type": "bf16"}),
    ("--fast-math none", {"auto_cast": "none", "auto_cast_type": "bf16"}),
    ("--fast-math fp32-cast-matmult no-fast-relayout -O1",
     {"auto_cast": "matmult", "auto_cast_type": "bf16"}),
    ("--fast-math=fp32-cast-all-fp16", {"auto_cast": "all", "auto_cast_type": "fp16"}),
    ("--fp32-cast matmult-fp16 --fast-math all", {"auto_cast": "matmult", "auto_cast_type": "fp16"}),
])
def test_neuron_cc_casting_flags(text, expected):
    fields = parse_cc_flags(text)
    assert {k: v for k, v in fields.items() if k != "ignored_flags"} == expected
    assert all("relayout" in f or f == "-O1" for f in fields["ignored_flags"])


def test_neuron_cc_flags_reach_an_inf1_compile():
    o = options_from_env({"NEURON_CC_FLAGS": "--fast-math fp32-cast-matmult"}, instance="inf1.xlarge")
    assert (o.auto_cast, o.auto_cast_type) == ("matmult", "bf16")


@pytest.mark.parametrize("text,expected", [
    ("--auto-cast none", {"auto_cast": "none"}),
    ("--auto-cast=all --auto-cast-type=fp16", {"auto_cast": "all", "auto_cast_type": "fp16"}),
    ("--auto-cast-type tf32 -O1", {"auto_cast_type": "tf32"}),
    ("-O3", {}),
    ("--optlevel 1", {}),
    ("--optlevel=2 -lnc 1", {"lnc": 1}),
    ("--auto-cast-type fp8_e4m3", {"auto_cast_type": "fp8_e4m3"}),
])
def test_flags_trnsim_models(text, expected):
    fields = parse_cc_flags(text)
    assert {k: v for k, v in fields.items() if k != "ignored_flags"} == expected


def test_optimisation_levels_are_checked_and_reported_as_ignored():
    """trnsim's compiler has one pass pipeline: no -O level changes what it produces."""
    assert parse_cc_flags("-O1 --optlevel 3 --optlevel=2")["ignored_flags"] == \
        ("-O1", "--optlevel 3", "--optlevel=2")
    o = options_from_env({}, optlevel=3)
    assert o.ignored_flags == ("optlevel=3",) and "optlevel" not in o.key()
    with pytest.raises(InvalidArgumentError, match="optimisation level must be 1, 2 or 3"):
        options_from_env({}, optlevel=7)


def test_flags_trnsim_does_not_model_are_kept_as_ignored():
    fields = parse_cc_flags("--model-type=generic --auto-cast none --enable-fast-loading-neuron-binaries "
                            "--target trn1")
    assert fields["auto_cast"] == "none" and fields["model_type"] == "generic"
    assert fields["ignored_flags"] == ("--enable-fast-loading-neuron-binaries", "--target", "trn1")


@pytest.mark.parametrize("text,message", [
    ("--auto-cast sometimes", "expected one of none, matmult, all"),
    ("--model-type bert", "expected one of generic, transformer, unet-inference"),
    ("--auto-cast-type bf8", "expected one of bf16, fp16, tf32, fp8_e4m3"),
    ("-O4", "optimisation level must be 1, 2 or 3"),
    ("--optlevel fast", "optimisation level"),
    ("--auto-cast", "needs a value"),
    ("--auto-cast 'unbalanced", "NEURON_CC_FLAGS"),
    ("--fast-math", "--fast-math needs a value"),
    ("--fast-math quick", "--fast-math 'quick': expected one of all, none"),
    ("--fp32-cast some", "--fp32-cast 'some': expected one of all, matmult"),
])
def test_bad_values_are_errors_that_name_the_flag(text, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_cc_flags(text)


def test_explicit_arguments_override_the_environment():
    env = {"NEURON_CC_FLAGS": "--auto-cast=all -O1"}
    o = options_from_env(env, auto_cast="none", optlevel=None)
    assert (o.auto_cast, o.ignored_flags) == ("none", ("-O1",))


def test_invalid_keyword_values_and_unknown_options_are_errors():
    with pytest.raises(InvalidArgumentError, match="auto_cast_type='int4'"):
        CompileOptions(auto_cast_type="int4")
    with pytest.raises(InvalidArgumentError, match="cores=0"):
        CompileOptions(cores=0)
    with pytest.raises(InvalidArgumentError, match="unknown compile option"):
        options_from_env({}, autocast="none")


def test_pipeline_cores_must_be_a_positive_count():
    assert parse_cc_flags("--neuroncore-pipeline-cores=4")["pipeline_cores"] == 4
    with pytest.raises(InvalidArgumentError, match="--neuroncore-pipeline-cores '0'"):
        parse_cc_flags("--neuroncore-pipeline-cores 0")
    with pytest.raises(InvalidArgumentError, match="pipeline_cores=-2"):
        CompileOptions(pipeline_cores=-2)
