"""A vision transformer's head: what the planner times besides its layers."""

import json

import torch

from trnsim.perf.scale.layer import HeadShape, build_head
from trnsim.perf.scale.layout import Layout, Training
from trnsim.perf.scale.model import from_config
from trnsim.perf.scale.plan import head_shape
from trnsim.perf.scale.timing import Timer
from trnsim.perf.zoo import shipped_configs


def test_a_vit_config_gives_a_patch_embedding_and_classifier_head():
    config = json.loads(shipped_configs()["vit-base-patch16-224"].read_text())
    model = from_config(config, "vit")
    assert (model.patch, model.channels, model.vocab) == (16, 3, 0)
    assert model.labels == 2  # no id2label: Hugging Face's default num_labels
    head = head_shape(model, Layout(tp=2, dp=16), Training(seq=197, micro_batch=4,
                                                           global_batch=64))
    assert head == HeadShape(768, 2, "layer", 4, 197, patch=16, channels=3)
    assert head.image_side == 224 and head.key() != HeadShape(768, 2, "layer", 4, 197).key()


def test_vision_head_embeds_as_hugging_face_vit_does():
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    shape = HeadShape(32, 5, "layer", 2, 17, patch=4, channels=3)
    head = build_head(shape)
    config = ViTConfig(hidden_size=32, image_size=16, patch_size=4, num_channels=3,
                       hidden_dropout_prob=0.0)
    reference = ViTEmbeddings(config).eval()
    with torch.no_grad():
        reference.patch_embeddings.projection.weight.copy_(head.patches.weight)
        reference.patch_embeddings.projection.bias.copy_(head.patches.bias)
        reference.cls_token.copy_(torch.randn(1, 1, 32))
        head.cls.copy_(reference.cls_token)
        reference.position_embeddings.copy_(torch.randn(1, 17, 32))
        head.position.copy_(reference.position_embeddings)
    pixels, hidden = torch.randn(2, 3, 16, 16), torch.randn(2, 17, 32)
    labels = torch.tensor([1, 4])
    loss, embedded = head(pixels, hidden, labels)
    torch.testing.assert_close(embedded, reference(pixels), rtol=1e-5, atol=1e-5)
    logits = head.classifier(head.norm(hidden)[:, 0])
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits, labels))


def test_vision_head_is_simulated_with_its_patch_convolution(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    shape = HeadShape(64, 10, "layer", 2, 17, patch=4, channels=3)
    timing = Timer("trn1.32xlarge", "bf16", "adamw").timing("head", shape)
    assert timing.forward_ns > 0 and timing.backward_ns > 0 and timing.optimizer_ns > 0
    # at least the patch convolution forward and its weight gradient (the pixels need none)
    conv = 2 * shape.micro_batch * (shape.seq - 1) * shape.hidden * shape.channels * shape.patch ** 2
    assert timing.flops >= 2 * conv


def test_a_sequence_parallel_layer_holds_a_token_shard_outside_the_tp_region():
    from dataclasses import replace

    from trnsim.perf.scale.layer import LayerShape, build_layer

    plain = LayerShape(32, 2, 1, 16, 48, True, "rms", True, True, 2, 16)
    shape = replace(plain, sp=4)
    assert shape.seq_shard == 4 and shape.key() == plain.key() + "-sp4"
    layer = build_layer(shape)
    x = torch.randn(2, 4, 32, requires_grad=True)
    out = layer(x)
    assert out.shape == x.shape  # the layer's output is the shard its input was
    # what the collectives read: the norms' shards (all-gathers), the row-parallel outputs over
    # the whole sequence, as rows (reduce-scatters)
    assert [tuple(t.shape) for t in layer.kept] == [(2, 4, 32), (32, 32)] * 2
    out.backward(torch.randn_like(out))
    assert x.grad.shape == x.shape
    # backward: the reduce-scatters' conjugates hand a shard back, the all-gathers' all rows
    assert [tuple(t.shape) for t in layer.kept[4:]] == [(2, 4, 32), (32, 32)] * 2
    reference = build_layer(plain)
    for (name, p), (_, q) in zip(layer.named_parameters(), reference.named_parameters(),
                                 strict=True):
        assert p.grad is not None and p.grad.shape == q.shape, name


def test_a_sequence_parallel_layer_times_every_projection_over_the_whole_sequence(
        tmp_path, monkeypatch):
    from dataclasses import replace

    from trnsim.perf.scale.layer import LayerShape

    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    plain = LayerShape(256, 2, 1, 64, 128, True, "rms", True, True, 1, 128)
    timer = Timer("trn1.32xlarge", "bf16", "adamw")
    timer.ensure([("layer", plain), ("layer", replace(plain, sp=8))])
    without, with_sp = timer.timing("layer", plain), timer.timing("layer", replace(plain, sp=8))
    # the projections and attention see all 128 tokens either way (none is dropped as dead
    # code at a collective's boundary); the norms and residuals see 16 with SP
    assert with_sp.flops >= without.flops
    assert with_sp.forward_ns > 0 and with_sp.backward_ns > 0


def test_a_sequence_parallel_head_reduce_scatters_the_embedding_and_gathers_the_norm():
    shape = HeadShape(32, 50, "rms", 2, 16, sp=4)
    assert shape.seq_shard == 4 and shape.key().endswith("-sp4")
    head = build_head(shape)
    ids = torch.randint(0, 50, (2, 16))
    hidden = torch.randn(2, 4, 32, requires_grad=True)  # the last layer's token shard
    loss, embedded = head(ids, hidden, ids)
    assert embedded.shape == (2, 4, 32)  # the first layer's token shard
    # what the collectives read: the embedding's partial rows of every token, the norm's shard
    assert [tuple(t.shape) for t in head.kept] == [(32, 32), (2, 4, 32)]
    torch.autograd.backward([loss, embedded], [None, torch.randn(2, 4, 32)])
    assert hidden.grad.shape == hidden.shape and head.embed.weight.grad.shape == (50, 32)
    assert head.lm_head.weight.grad is not None
