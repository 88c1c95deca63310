"""Which Hugging Face architectures trace, compile and compute what eager PyTorch computes.

Every architecture is built from a small config with random weights (nothing downloaded), run
eagerly and through `trnsim.trace` on one trn1 NeuronCore with auto-cast off (fp32 TensorE: the
lowering must match to fp32 rounding), with a padding mask where the model takes one. Prints
JSON: per model, the max error over the output's scale, or the error it failed with.

    PYTHONPATH=src python benchmarks/model_coverage.py            # tiny: hidden 128, 32 tokens
    PYTHONPATH=src python benchmarks/model_coverage.py --size mid  # hidden 384, 200 tokens
    PYTHONPATH=src python benchmarks/model_coverage.py --instance trn2.48xlarge  # LNC=2
"""

from __future__ import annotations

import argparse
import json
import os
import time

TOLERANCE = 1e-4  # fp32 matmuls: anything above is a lowering bug, not rounding


def _batched_experts(model):
    model.set_experts_implementation("batched_mm")
    return model


def _cases(size: str) -> dict:
    import torch
    import transformers as T

    hidden, heads, head_dim, tokens = (128, 4, 32, 32) if size == "tiny" else (384, 6, 64, 200)
    layers, ffn = (2, 256) if size == "tiny" else (1, 1536)
    H = dict(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
             num_attention_heads=heads)
    seq2seq = dict(d_model=hidden, encoder_layers=1, decoder_layers=1, encoder_attention_heads=heads,
                   decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
                   vocab_size=1000)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, tokens), generator=g)
    pad = torch.ones(2, tokens, dtype=torch.int64)
    pad[1, tokens * 3 // 4:] = 0
    text = {"input_ids": ids, "attention_mask": pad}
    dec = {**text, "decoder_input_ids": torch.randint(0, 1000, (2, 8), generator=g)}
    image = {"pixel_values": torch.randn(2, 3, 64, 64, generator=g)}
    lm = dict(**H, vocab_size=1000)
    gqa = dict(**lm, num_key_value_heads=2)
    return {
        "bert": (lambda: T.BertModel(T.BertConfig(**lm)), text),
        "roberta": (lambda: T.RobertaModel(T.RobertaConfig(**lm)), text),
        "xlm-roberta": (lambda: T.XLMRobertaModel(T.XLMRobertaConfig(**lm)), text),
        "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(
            dim=hidden, hidden_dim=ffn, n_layers=layers, n_heads=heads, vocab_size=1000)), text),
        "albert": (lambda: T.AlbertModel(T.AlbertConfig(**lm, embedding_size=64)), text),
        "deberta-v2": (lambda: T.DebertaV2Model(T.DebertaV2Config(**lm)), text),
        "convbert": (lambda: T.ConvBertModel(T.ConvBertConfig(**lm)), text),
        "mpnet": (lambda: T.MPNetModel(T.MPNetConfig(**lm)), text),
        "esm": (lambda: T.EsmModel(T.EsmConfig(**H, vocab_size=33, pad_token_id=1,
                                               position_embedding_type="rotary")),
                {"input_ids": ids % 33, "attention_mask": pad}),
        "modernbert": (lambda: T.ModernBertModel(T.ModernBertConfig(
            **lm, pad_token_id=0, global_attn_every_n_layers=2, local_attention=8)), text),
        "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=hidden, n_layer=layers,
                                                        n_head=heads, vocab_size=1000)), text),
        "gpt-neo": (lambda: T.GPTNeoModel(T.GPTNeoConfig(
            hidden_size=hidden, num_layers=2, num_heads=heads, vocab_size=1000, window_size=8,
            attention_types=[[["global", "local"], 1]])), text),
        "gptj": (lambda: T.GPTJModel(T.GPTJConfig(n_embd=hidden, n_layer=layers, n_head=heads,
                                                  rotary_dim=16, vocab_size=1000)), text),
        "gpt-neox": (lambda: T.GPTNeoXModel(T.GPTNeoXConfig(**lm)), text),
        "opt": (lambda: T.OPTModel(T.OPTConfig(hidden_size=hidden, ffn_dim=ffn,
                                               num_hidden_layers=layers, num_attention_heads=heads,
                                               vocab_size=1000, word_embed_proj_dim=hidden)), text),
        "bloom": (lambda: T.BloomModel(T.BloomConfig(hidden_size=hidden, n_layer=layers,
                                                     n_head=heads, vocab_size=1000)), text),
        "falcon": (lambda: T.FalconModel(T.FalconConfig(hidden_size=hidden, num_hidden_layers=layers,
                                                        num_attention_heads=heads, vocab_size=1000,
                                                        multi_query=True)), text),
        "llama": (lambda: T.LlamaForCausalLM(T.LlamaConfig(**gqa)), text),
        "mistral": (lambda: T.MistralModel(T.MistralConfig(**gqa, sliding_window=8)), text),
        # mixture of experts, Hugging Face's default grouped_mm experts (sort, histc, the
        # grouped matmul, index_put), and Mixtral's batched_mm alternative (gathered weights)
        "mixtral": (lambda: T.MixtralModel(T.MixtralConfig(**gqa, num_local_experts=4,
                                                           num_experts_per_tok=2)), text),
        "mixtral-batched-mm": (lambda: _batched_experts(T.MixtralModel(T.MixtralConfig(
            **gqa, num_local_experts=4, num_experts_per_tok=2))), text),
        "qwen2-moe": (lambda: T.Qwen2MoeModel(T.Qwen2MoeConfig(
            **gqa, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=ffn // 4,
            shared_expert_intermediate_size=ffn // 2)), text),
        "qwen3-moe": (lambda: T.Qwen3MoeModel(T.Qwen3MoeConfig(
            **gqa, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=ffn // 4)), text),
        "olmoe": (lambda: T.OlmoeModel(T.OlmoeConfig(**gqa, num_experts=4,
                                                     num_experts_per_tok=2)), text),
        "qwen2": (lambda: T.Qwen2Model(T.Qwen2Config(**gqa)), text),
        "qwen3": (lambda: T.Qwen3Model(T.Qwen3Config(**gqa, head_dim=head_dim)), text),
        "gemma": (lambda: T.GemmaModel(T.GemmaConfig(**lm, num_key_value_heads=1,
                                                     head_dim=head_dim)), text),
        "gemma2": (lambda: T.Gemma2Model(T.Gemma2Config(**gqa, head_dim=head_dim,
                                                        sliding_window=8)), text),
        "phi": (lambda: T.PhiModel(T.PhiConfig(**lm)), text),
        "phi3": (lambda: T.Phi3Model(T.Phi3Config(**gqa, pad_token_id=0)), text),
        "olmo": (lambda: T.OlmoModel(T.OlmoConfig(**lm, pad_token_id=0)), text),
        "granite": (lambda: T.GraniteModel(T.GraniteConfig(**gqa)), text),
        "t5-encoder": (lambda: T.T5EncoderModel(T.T5Config(
            d_model=hidden, d_ff=ffn, num_layers=layers, num_heads=heads, d_kv=head_dim,
            vocab_size=1000)), text),
        "t5": (lambda: T.T5Model(T.T5Config(d_model=hidden, d_ff=ffn, num_layers=layers,
                                            num_heads=heads, d_kv=head_dim, vocab_size=1000,
                                            use_cache=False)), dec),
        "bart": (lambda: T.BartModel(T.BartConfig(**seq2seq, pad_token_id=1, bos_token_id=0,
                                                  eos_token_id=2, decoder_start_token_id=2)), text),
        "marian": (lambda: T.MarianModel(T.MarianConfig(**seq2seq, pad_token_id=0,
                                                        decoder_start_token_id=0)), dec),
        "pegasus": (lambda: T.PegasusModel(T.PegasusConfig(**seq2seq, pad_token_id=0,
                                                           decoder_start_token_id=0)), dec),
        "funnel": (lambda: T.FunnelModel(T.FunnelConfig(d_model=hidden, n_head=heads,
                                                        d_head=head_dim, d_inner=ffn,
                                                        block_sizes=[1, 1], vocab_size=1000)), text),
        "whisper-encoder": (lambda: T.WhisperModel(T.WhisperConfig(
            d_model=hidden, encoder_layers=1, decoder_layers=1, encoder_attention_heads=heads,
            decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
            num_mel_bins=16, max_source_positions=32, vocab_size=1000, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)).get_encoder(),
            {"input_features": torch.randn(1, 16, 64, generator=g)}),
        "wav2vec2": (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
            **H, conv_dim=(32, 32), conv_kernel=(10, 3), conv_stride=(5, 2),
            num_feat_extract_layers=2, num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4)), {"input_values": torch.randn(1, 1600, generator=g)}),
        "vit": (lambda: T.ViTModel(T.ViTConfig(**H, image_size=64, patch_size=16)), image),
        "deit": (lambda: T.DeiTModel(T.DeiTConfig(**H, image_size=64, patch_size=16)), image),
        # trained at 48x80: position embeddings resized (bicubic) to the 64x64 input's patches
        "yolos": (lambda: T.YolosModel(T.YolosConfig(**H, image_size=[48, 80], patch_size=16,
                                                     num_detection_tokens=10),
                                       add_pooling_layer=False), image),
        "beit": (lambda: T.BeitModel(T.BeitConfig(**H, image_size=64, patch_size=16,
                                                  use_relative_position_bias=True)), image),
        "dinov2": (lambda: T.Dinov2Model(T.Dinov2Config(hidden_size=hidden,
                                                        num_hidden_layers=layers,
                                                        num_attention_heads=heads, image_size=64,
                                                        patch_size=16)), image),
        "clip-vision": (lambda: T.CLIPVisionModel(T.CLIPVisionConfig(**H, image_size=64,
                                                                     patch_size=16)), image),
        "siglip-vision": (lambda: T.SiglipVisionModel(T.SiglipVisionConfig(
            **H, image_size=64, patch_size=16)), image),
        "swin": (lambda: T.SwinModel(T.SwinConfig(image_size=64, patch_size=4, embed_dim=32,
                                                  depths=[1, 1], num_heads=[2, 4],
                                                  window_size=4)), image),
        "segformer": (lambda: T.SegformerModel(T.SegformerConfig(
            image_size=64, hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 4, 8],
            depths=[1, 1, 1, 1], decoder_hidden_size=64)), image),
        "levit": (lambda: T.LevitModel(T.LevitConfig(image_size=64, hidden_sizes=[32, 64, 96],
                                                     num_attention_heads=[1, 2, 3],
                                                     depths=[1, 1, 1], key_dim=[8, 8, 8])), image),
        "resnet": (lambda: T.ResNetModel(T.ResNetConfig(
            embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
            layer_type="bottleneck")), image),
        "regnet": (lambda: T.RegNetModel(T.RegNetConfig(embedding_size=16,
                                                        hidden_sizes=[16, 32, 64, 128],
                                                        depths=[1, 1, 1, 1], groups_width=8)), image),
        "convnext": (lambda: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[32, 64, 128, 256],
                                                              depths=[1, 1, 1, 1],
                                                              image_size=64)), image),
        "convnextv2": (lambda: T.ConvNextV2Model(T.ConvNextV2Config(
            hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], image_size=64)), image),
        "poolformer": (lambda: T.PoolFormerModel(T.PoolFormerConfig(
            hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])), image),
        "mobilenetv2": (lambda: T.MobileNetV2Model(T.MobileNetV2Config(image_size=64)),
                        {"pixel_values": image["pixel_values"][:1]}),
    }


def _leaf(output):
    import torch

    if isinstance(output, torch.Tensor):
        return output
    for key in ("last_hidden_state", "logits"):
        value = getattr(output, key, None)
        if value is not None:
            return value
    return output[0]


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRNSIM_CACHE_DIR", "off")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("tiny", "mid"), default="tiny")
    parser.add_argument("--only", action="append", help="only these architectures")
    parser.add_argument("--instance", default="trn1.2xlarge",
                        help="e.g. trn2.48xlarge: kernels split over two physical cores (LNC=2)")
    args = parser.parse_args()
    import torch

    import trnsim

    rows, start = {}, time.perf_counter()
    for name, (build, inputs) in _cases(args.size).items():
        if args.only and name not in args.only:
            continue
        begin = time.perf_counter()
        try:
            torch.manual_seed(0)
            model = build().eval()
            with torch.no_grad():
                want = _leaf(model(**inputs)).float()
            compiled = trnsim.trace(model, (), kwargs=inputs, instance=args.instance,
                                    auto_cast="none")
            got = _leaf(compiled(**inputs)).float()
            error = float((got - want).abs().max() / want.abs().max())
            rows[name] = {"ok": error < TOLERANCE, "max_error_over_scale": error}
        except Exception as exc:  # reported per model: the point is to see every failure
            rows[name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        rows[name]["seconds"] = round(time.perf_counter() - begin, 1)
    print(json.dumps({"size": args.size, "instance": args.instance, "tolerance": TOLERANCE,
                      "passed": sum(r["ok"] for r in rows.values()), "models": len(rows),
                      "seconds": round(time.perf_counter() - start, 1), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
