import pytest

from trnsim import hardware
from trnsim.errors import TrnsimError, UnknownNameError


def test_lookup_forgives_case_and_space():
    assert hardware.instance(" TRN1.32XLARGE ") is hardware.instance("trn1.32xlarge")
    assert hardware.chip("trainium2") is hardware.chip("Trainium2")


def test_unknown_instance_suggests_close_names():
    with pytest.raises(UnknownNameError) as info:
        hardware.instance("trn1.32xlarg")
    assert "trn1.32xlarge" in info.value.suggestions
    assert isinstance(info.value, TrnsimError)
    assert "did you mean" in str(info.value)


def test_unknown_name_without_close_match_lists_known():
    with pytest.raises(UnknownNameError, match="known: "):
        hardware.chip("zzzzzz")


def test_fingerprint_is_stable_across_processes_and_changes_with_any_figure():
    """Compile-cache keys use it: it must not depend on hash seeds (frozensets) but must see
    every figure."""
    import os
    import subprocess
    import sys

    from trnsim import hardware
    from trnsim.hardware.spec import fingerprint

    code = ("from trnsim import hardware; from trnsim.hardware.spec import fingerprint; "
            "print(fingerprint(hardware.instance('inf1.xlarge')))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2", "3")}
    assert seen == {fingerprint(hardware.instance("inf1.xlarge"))}
    base = fingerprint(hardware.core(2))
    with hardware.core_variant(2, dma={"descriptor_overhead_bytes": 0}) as variant:
        assert fingerprint(variant) != base
        assert hardware.instance("inf2.xlarge").chip.core is variant
    assert fingerprint(hardware.core(2)) == base


def test_fabric_variant_changes_the_fabric_only_inside_the_block():
    from trnsim import hardware

    base = hardware.fabric_spec("Trainium")
    with hardware.fabric_variant("Trainium", launch_latency_ns=0.0) as variant:
        assert hardware.fabric_spec("Trainium") is variant and variant.launch_latency_ns == 0.0
    assert hardware.fabric_spec("Trainium") is base and base.launch_latency_ns > 0
