"""A short fuzz run of the command line's argument checks (benchmarks/fuzz.py runs it at
length): hostile argument lists end accepted or in one clean error line, never a traceback."""

from hypothesis import HealthCheck, given, settings

from tests.fuzz_targets import KERNEL_SOURCE, argvs, cli_case, work_stubbed


def test_hostile_command_lines_fail_cleanly(tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(KERNEL_SOURCE)

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(argv=argvs)
    def case(argv):
        command, args = argv
        outcome = cli_case(command, args, f"{kernel}::copy")
        assert not outcome.startswith("uncaught"), (command, args, outcome)

    with work_stubbed():
        case()
