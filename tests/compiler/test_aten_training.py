"""The backward's scatters as the engines do them: an embedding's gradient is rows added into
a zeroed table by indirect DMA (read-add-write), not a one-hot matmul; nll_loss's one-hot
gradient is one compare-select pass, not a mask reduced over a size-1 axis. Numbers against
eager PyTorch; the mechanism by the instructions the program holds."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")


class EmbeddingGrad(torch.nn.Module):
    def forward(self, ids, grad):
        return torch.ops.aten.embedding_dense_backward(grad, ids, 300, -1, False)


class NllGrad(torch.nn.Module):
    def forward(self, logits, target):
        return torch.zeros_like(logits).scatter(1, target[:, None], -1.0) * logits


def _compiled(model, inputs):
    import trnsim

    return trnsim.trace(model, inputs, instance="trn1.2xlarge", auto_cast="none")


def test_embedding_gradient_is_a_dma_scatter_add():
    ids = torch.randint(0, 300, (2, 200))
    ids[0, :5] = 7  # repeats within one DMA and across two sum
    ids[1, 100] = 7
    grad = torch.randn(2, 200, 40)
    compiled = _compiled(EmbeddingGrad(), (ids, grad))
    np.testing.assert_allclose(compiled(ids, grad).numpy(), EmbeddingGrad()(ids, grad).numpy(),
                               rtol=1e-6, atol=1e-6)
    program = compiled.program.instructions
    scatters = [i for i in program if i.OPCODE == "DmaIndirect" and i.accumulate]
    assert len(scatters) == 4  # 400 token rows, 128 per DMA
    assert not [i for i in program if i.OPCODE == "MultiplyMoving"]  # no [300, 400] one-hot matmul


def test_nll_loss_gradient_is_one_compare_select_pass():
    logits = torch.randn(200, 3000)
    target = torch.randint(0, 3000, (200,))
    compiled = _compiled(NllGrad(), (logits, target))
    np.testing.assert_array_equal(compiled(logits, target).numpy(),
                                  NllGrad()(logits, target).numpy())
    ops = {k.op for k in compiled.kernels}
    assert "k.reduce" not in ops, ops  # no [N, C, 1] mask reduced over its size-1 axis
