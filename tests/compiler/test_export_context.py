"""The context torch.export runs in: each piece is undone when the capture ends."""

import torch

from trnsim.compiler.export_context import inference_mode, meta_as_zeros, meta_tensors


class _Wrapped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Dropout(0.5)
        self.linear = torch.nn.Linear(4, 4)


def test_inference_mode_restores_each_submodule_and_use_cache():
    model = _Wrapped()
    model.inner.eval()  # an eval-mode module inside a train-mode one keeps its own mode
    model.config = type("Config", (), {"use_cache": True})()
    with inference_mode(model):
        assert not model.training and not model.inner.training
        assert model.config.use_cache is False
    assert model.training and not model.inner.training and model.linear.training
    assert model.config.use_cache is True


def test_meta_as_zeros_swaps_meta_weights_for_stand_ins_and_puts_them_back():
    model = _Wrapped()
    model.linear.to("meta")
    weight = model.linear.weight
    assert meta_tensors(model) == {"linear.weight": "parameter", "linear.bias": "parameter"}
    with meta_as_zeros(model):
        stand_in = model.linear.weight
        assert not stand_in.is_meta and stand_in.shape == (4, 4) and stand_in.stride() == (0, 0)
        assert float(stand_in.abs().sum()) == 0.0
    assert model.linear.weight is weight and weight.is_meta
