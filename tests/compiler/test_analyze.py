"""analyze(): torch_neuronx.analyze's report: counts, support percentage, unsupported calls."""

import pytest

from trnsim.compiler.analyze import analyze

torch = pytest.importorskip("torch")


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 32)

    def forward(self, x):
        y = torch.relu(self.fc2(self.fc(x))).view(1, 2, 4, 16)
        return torch.nn.functional.adaptive_max_pool2d(y, (1, 1)).sum()


def test_report_has_torch_neuronx_keys_counts_and_call_sites():
    report = analyze(Mixed(), (torch.randn(4, 8),))
    assert set(report) == {"torch_neuronx_version", "neuronx_cc_version", "support_percentage",
                           "supported_operators", "unsupported_operators"}
    assert report["torch_neuronx_version"].startswith("trnsim-")
    assert report["supported_operators"]["aten::linear"] == 2
    assert report["supported_operators"]["aten::relu"] == 1
    (bad,) = report["unsupported_operators"]
    assert bad["kind"] == "aten::adaptive_max_pool2d"
    line = Mixed.forward.__code__.co_firstlineno + 2
    assert bad["call"].split(": ", 1)[0].endswith(f"test_analyze.py:{line}")
    assert "adaptive_max_pool2d(y, (1, 1))" in bad["call"]
    assert set(bad) == {"kind", "failureAt", "call", "opGraph"}
    supported = sum(report["supported_operators"].values())
    expected = 100 * supported / (supported + 1)
    assert report["support_percentage"] == f"{expected:.2f}%"


def test_a_fully_supported_model_reports_100_percent(zoo):
    m = zoo.get("bert")
    report = analyze(m.model, m.example)
    assert report["support_percentage"] == "100.00%"
    assert report["unsupported_operators"] == []
    assert report["supported_operators"]["aten::scaled_dot_product_attention"] == 2
