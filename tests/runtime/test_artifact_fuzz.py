"""A short fuzz run of the artifact loader (benchmarks/fuzz.py runs it at length): every mutated
artifact loads or ends in a TrnsimError, and no structure type runs code."""

import pytest

pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings

from tests.fuzz_targets import artifact_case, make_artifact, mutations, reseal_flags


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_artifact(tmp_path_factory.mktemp("fuzz"))


def test_mutated_artifacts_load_or_fail_cleanly(base, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cases")

    @settings(max_examples=15, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(changes=mutations, reseal=reseal_flags)
    def case(changes, reseal):
        outcome = artifact_case(base, workdir, changes, reseal)
        assert not outcome.startswith("uncaught"), (changes, reseal, outcome)

    case()
