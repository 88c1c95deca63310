"""Training rows of `trnsim validate`: the layout a row's framework runs."""

from trnsim.perf.scale.validation import precision_of, row_layout


def test_a_neuronx_distributed_row_with_tp_runs_sequence_parallel():
    nxd = {"name": "meta-llama/Llama-3.1-8B (pretraining, NeuronX Distributed, ZeRO-1)",
           "parallelism": "TP32 DP32 ZeRO-1"}
    layout = row_layout(nxd)
    assert layout.sp and layout.zero1 and (layout.tp, layout.dp) == (32, 32)
    # another framework's row, or NxD without TP, keeps the layout it states
    assert not row_layout({**nxd, "name": "meta-llama/Llama-3.1-8B (Megatron)"}).sp
    assert not row_layout({**nxd, "parallelism": "DP32"}).sp
    assert row_layout({"name": "gpt (NxD)", "parallelism": "TP8 DP4"}).sp


def test_precision_of_a_rows_dtype():
    assert precision_of("bf16 autocast with fp32 optimizer") == "mixed"
    assert precision_of("bf16 (+ stochastic rounding)") == "bf16"
    assert precision_of("") == "fp32"
