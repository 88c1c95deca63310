"""neuron-monitor's configuration file: periods, metric groups, tag filters; bad input refused."""

import json

import pytest

from trnsim.cli.monitor_report import (
    Monitor,
    config_from_dict,
    default_config,
    parse_period,
    read_config,
)
from trnsim.errors import InvalidArgumentError, UnknownNameError

AWS_EXAMPLE = {"period": "1s", "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
    {"type": "neuroncore_counters"}, {"type": "memory_used"}, {"type": "neuron_runtime_vcpu_usage"},
    {"type": "execution_stats"}]}], "system_metrics": [{"type": "vcpu_usage"},
    {"type": "memory_info"}, {"type": "neuron_hw_counters", "period": "2s"}]}


def test_periods():
    assert parse_period("1s", "x") == 1.0
    assert parse_period("500ms", "x") == 0.5
    assert parse_period("5m", "x") == 300.0
    for bad in ("1", "fast", "-1s", "1 d"):
        with pytest.raises(InvalidArgumentError, match="period"):
            parse_period(bad, "x")
    with pytest.raises(InvalidArgumentError, match="minimum"):
        parse_period("1ms", "x")


def test_aws_example_config(tmp_path):
    path = tmp_path / "monitor.conf"
    path.write_text(json.dumps(AWS_EXAMPLE))
    config = read_config(str(path))
    assert config.period_s == 1.0 and config.tick_s == 1.0
    assert [g.kind for g in config.runtimes[0].groups] == ["neuroncore_counters", "memory_used",
                                                          "neuron_runtime_vcpu_usage",
                                                          "execution_stats"]
    assert {g.kind: g.period_s for g in config.system}["neuron_hw_counters"] == 2.0


@pytest.mark.parametrize("data, error, match", [
    ({"period": "1s", "colour": "red"}, InvalidArgumentError, "unknown key 'colour'"),
    ({"neuron_runtimes": [{"metrics": [{"type": "gpu_counters"}]}]}, UnknownNameError,
     "gpu_counters"),
    ({"neuron_runtimes": [{"tag_filter": "("}]}, InvalidArgumentError, "tag_filter"),
    ({"system_metrics": {"type": "vcpu_usage"}}, InvalidArgumentError, "expected a JSON list"),
    ([], InvalidArgumentError, "expected a JSON object"),
])
def test_bad_configs_are_refused(data, error, match):
    with pytest.raises(error, match=match):
        config_from_dict(data, "monitor.conf")


def test_unreadable_config(tmp_path):
    with pytest.raises(InvalidArgumentError, match="not JSON"):
        (tmp_path / "c.json").write_text("{")
        read_config(str(tmp_path / "c.json"))
    with pytest.raises(InvalidArgumentError, match=r"missing\.json"):
        read_config(str(tmp_path / "missing.json"))


class _Host:
    started = 0.0

    def vcpu_usage(self):
        return {"average_usage": {}, "usage_data": {}, "context_switch_count": 0, "error": ""}

    def memory_info(self):
        return {"memory_total_bytes": 1, "memory_used_bytes": 1, "swap_total_bytes": 0,
                "swap_used_bytes": 0, "error": ""}


def test_hardware_info_follows_the_instance():
    info = Monitor(default_config(), "trn2.48xlarge", _Host()).hardware_info()
    assert info["neuron_device_type"] == "trainium2"
    assert info["neuron_device_version"] == "v4" and info["neuroncore_version"] == "v3d"
    assert info["neuron_device_count"] == 16
    inf2 = Monitor(default_config(), "inf2.xlarge", _Host()).hardware_info()
    assert (inf2["neuron_device_version"], inf2["neuroncore_per_device_count"]) == ("v3", 2)


def test_report_groups_carry_period_and_error():
    report = Monitor(default_config(1.0), "trn1.2xlarge", _Host()).report([], now=5.0)
    assert set(report) == {"neuron_runtime_data", "system_data", "instance_info",
                           "neuron_hardware_info"}
    for group in report["system_data"].values():
        assert group["error"] == "" and group["period"] == 5.0
    assert len(report["system_data"]["neuron_hw_counters"]["neuron_devices"]) == 1
