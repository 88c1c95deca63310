"""`trnsim bench`: the table's arithmetic, the report cache, inf1 (no GpSimd), JSON/CSV, the plot."""

import json
import struct
import zlib

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trnsim import hardware
from trnsim.cli import main
from trnsim.perf import bench, cost_per_inference, zoo

TINY = "bert-tiny-test"


@pytest.fixture
def tiny_zoo(monkeypatch, tmp_path):
    """A 2-layer BERT in the zoo (the real entries take minutes to compile) and a fresh cache."""
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    entry = zoo.ZooEntry(TINY, "text", zoo._hf("BertModel", "BertConfig", hidden_size=128,
                                               num_hidden_layers=2, num_attention_heads=2,
                                               intermediate_size=256, vocab_size=3000), 32)
    monkeypatch.setitem(zoo.ZOO, TINY, entry)
    return entry


def _result(model, batch, instance, latency, throughput, cost):
    return bench.BenchResult(model=model, batch=batch, seq=128, instance=instance,
                             auto_cast="matmult", latency_ms=latency, loaded_latency_ms=latency,
                             throughput_per_s=throughput, cost_per_inference_usd=cost, copies=1,
                             bound={})


def test_cost_per_inference_is_price_over_inferences_per_hour():
    # $0.76/h serving 500 inferences/s: 0.76 / (500 * 3600) = 4.2222e-7
    assert cost_per_inference(0.76, 500.0) == pytest.approx(4.2222222e-7, rel=1e-6)
    assert cost_per_inference(None, 500.0) is None
    assert cost_per_inference(1.0, 0.0) is None


def test_speedup_is_first_instance_latency_over_last():
    results = [_result("m", 1, "inf1.xlarge", 28.0, 35.7, 1.0e-6),
               _result("m", 1, "inf2.xlarge", 3.5, 571.4, 3.0e-7),
               _result("m", 10, "inf1.xlarge", 120.0, 83.3, 7.0e-7)]
    rows = bench.comparison_rows(results, ("inf1.xlarge", "inf2.xlarge"))
    assert [(r["model"], r["batch"]) for r in rows] == [("m", 1), ("m", 10)]
    assert rows[0]["speedup"] == pytest.approx(8.0)
    assert rows[1]["speedup"] is None  # inf2 missing
    assert rows[1]["by_instance"]["inf2.xlarge"] is None


def test_published_latency_comes_from_the_calibration_set():
    assert bench.published_latency("bert-large-uncased", "inf2.xlarge", 1, 128) == 3.1
    assert bench.published_latency("electra-large-discriminator", "inf1.xlarge", 10, 256) == 343.7
    assert bench.published_latency("bert-large-uncased", "trn1.2xlarge", 1, 128) is None


def test_run_case_arithmetic_and_cache(tiny_zoo):
    first = bench.run_case(TINY, 2, None, "inf2.xlarge")
    spec = hardware.instance("inf2.xlarge")
    assert first.seq == 32 and first.copies == spec.chip.cores
    assert first.latency_ms > 0 and first.loaded_latency_ms >= first.latency_ms * 0.999
    # throughput: copies x batch / loaded latency; cost: $/h / 3600 / throughput
    assert first.throughput_per_s == pytest.approx(first.copies * 2 / (first.loaded_latency_ms / 1e3))
    assert first.cost_per_inference_usd == pytest.approx(
        spec.price_per_hour / 3600 / first.throughput_per_s)
    assert first.published_ms is None and not first.cache_hit
    again = bench.run_case(TINY, 2, None, "inf2.xlarge")
    assert again.cache_hit and again.latency_ms == first.latency_ms


def test_a_warm_case_neither_builds_nor_captures_its_model(tiny_zoo, monkeypatch):
    first = bench.run_matrix((TINY,), ("inf2.xlarge",), (1,))[0]
    assert not first.cache_hit

    def refuse(*args, **kwargs):
        raise AssertionError("a cached case built or traced its model")

    monkeypatch.setattr(bench, "build_model", refuse)
    monkeypatch.setattr("trnsim.runtime.trace", refuse)
    again = bench.run_matrix((TINY,), ("inf2.xlarge",), (1,))[0]
    assert again.cache_hit
    assert {**again.to_dict(), "seconds": 0, "cache_hit": False} == \
        {**first.to_dict(), "seconds": 0, "cache_hit": False}


def test_a_model_from_a_config_file_is_cached_like_a_zoo_entry(monkeypatch, tmp_path):
    """A config.json model (`--config`, a shipped config such as llama-2-7b) keys the result
    cache on its fields: a warm case neither builds nor traces it."""
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    fields = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 2, "vocab_size": 500}
    path = tmp_path / "tiny-llama.json"
    path.write_text(json.dumps(fields))
    first = bench.run_matrix((str(path),), ("inf2.xlarge",), (1,), 16)[0]
    assert not first.cache_hit

    def refuse(*args, **kwargs):
        raise AssertionError("a cached case built or traced its model")

    monkeypatch.setattr(bench, "build_model", refuse)
    monkeypatch.setattr("trnsim.runtime.trace", refuse)
    again = bench.run_matrix((str(path),), ("inf2.xlarge",), (1,), 16)[0]
    assert again.cache_hit and again.latency_ms == first.latency_ms
    path.write_text(json.dumps({**fields, "intermediate_size": 256}))  # another model: a miss
    with pytest.raises(AssertionError, match="built or traced"):
        bench.run_matrix((str(path),), ("inf2.xlarge",), (1,), 16)
    shipped = [bench.result_key(name, 1, 2048, "trn1.2xlarge") for name in ("llama-2-7b",
                                                                           "llama-3-8b")]
    assert None not in shipped and shipped[0] != shipped[1]


def test_the_result_key_follows_inputs_options_and_flags(tiny_zoo, monkeypatch):
    def key(batch=1, seq=32, instance="inf2.xlarge", **options):
        options = {"auto_cast": None, "auto_cast_type": "bf16", "decode": False, "lnc": None,
                   "tensor_parallel": 1, **options}
        return bench.result_key(TINY, batch, seq, instance, **options)

    base = key()
    assert base == key()
    variants = [key(batch=2), key(seq=64), key(instance="trn1.2xlarge"), key(decode=True),
                key(auto_cast="none"), key(tensor_parallel=2)]
    monkeypatch.setenv("NEURON_CC_FLAGS", "--auto-cast none")
    variants.append(key())
    assert len({base, *variants}) == len(variants) + 1


def test_inf1_runs_without_gpsimd_and_is_slower(tiny_zoo):
    results = bench.run_matrix((TINY,), ("inf1.xlarge", "inf2.xlarge"), (1,))
    by = {r.instance: r for r in results}
    assert hardware.instance("inf1.xlarge").chip.core.gpsimd is None
    assert by["inf1.xlarge"].latency_ms > by["inf2.xlarge"].latency_ms


def test_check_numerics_on_inf1_matches_pytorch(tiny_zoo):
    result = bench.run_case(TINY, 1, 16, "inf1.xlarge", check_numerics=True)
    assert result.numerics["min_cosine_similarity"] > 0.999
    assert result.numerics["max_abs_error_over_output_scale"] < 3e-2  # bf16 matmuls


def _run_cli(capsys, *argv):
    try:
        main(list(argv))
    except SystemExit as stop:
        assert stop.code in (0, None), capsys.readouterr().err
    return capsys.readouterr()


def test_cli_json_and_csv(tiny_zoo, capsys):
    out = _run_cli(capsys, "bench", "--models", TINY, "--instances", "inf1.xlarge,inf2.xlarge",
                   "--batch", "1", "--json").out
    data = json.loads(out)
    by = {r["instance"]: r for r in data["results"]}
    # each instance compiles as its own compiler does by default (neuron-cc casts everything)
    assert data["auto_cast"] == {"inf1.xlarge": "all", "inf2.xlarge": "matmult"}
    assert data["rows"][0]["speedup"] == pytest.approx(
        by["inf1.xlarge"]["latency_ms"] / by["inf2.xlarge"]["latency_ms"])
    csv_out = _run_cli(capsys, "bench", "--models", TINY, "--instances", "inf2.xlarge", "--batch",
                       "1,2", "--csv").out.splitlines()
    assert csv_out[0].startswith("model,batch,seq,instance,latency_ms")
    assert len(csv_out) == 3


def test_cli_table_and_bad_input(tiny_zoo, capsys):
    out = _run_cli(capsys, "bench", "--models", TINY, "--instances", "trn1.2xlarge", "--batch",
                   "1").out
    assert TINY in out and "trn1.2xlarge latency ms" in out and "trn1.2xlarge matmult" in out
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--models", "no-such-model"])
    assert stop.value.code == 2
    assert "no-such-model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--batch", "one"])
    assert stop.value.code == 2


def test_help_names_the_inf1_assumptions(capsys):
    out = _run_cli(capsys, "bench", "--help").out
    assert "Inferentia" in out and "assumptions" in out.lower()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    assert zlib.crc32(data[12:29]) == struct.unpack(">I", data[29:33])[0]
    return width, height


def test_plot_is_a_png_with_a_bar_per_case_and_instance(tmp_path):
    pytest.importorskip("matplotlib")
    from trnsim.perf.plot import bench_plot

    results = [_result("bert-large-uncased", 1, "inf1.xlarge", 28.0, 35.7, 1.0e-6),
               _result("bert-large-uncased", 1, "inf2.xlarge", 3.5, 571.4, 3.0e-7),
               _result("electra-large-discriminator", 10, "inf1.xlarge", 340.0, 29.4, 2.0e-6),
               _result("electra-large-discriminator", 10, "inf2.xlarge", 40.0, 500.0, 4.0e-7)]
    results[0].published_ms = 28.2
    path = tmp_path / "bench.png"
    figure = bench_plot(results, ("inf1.xlarge", "inf2.xlarge"), str(path))
    width, height = _png_size(path.read_bytes())
    assert width > 400 and height > 200
    latency_axis, cost_axis = figure["axes"]
    assert latency_axis["bars"] == [28.0, 340.0, 3.5, 40.0]  # per instance, per case
    assert cost_axis["bars"] == pytest.approx([1.0, 2.0, 0.3, 0.4])  # $ per million
    assert latency_axis["published"] == [28.2]


@pytest.mark.parametrize("name,params", [("llama-3.2-1b", 1.236e9), ("llama-2-7b", 6.738e9),
                                         ("mistral-7b", 7.242e9), ("mixtral-8x7b", 46.70e9)])
def test_llm_zoo_entries_have_their_published_sizes(name, params):
    """Built without weights (meta parameters): the configs give the checkpoints' sizes."""
    pytest.importorskip("transformers")
    model = bench.build_model(name, initialise=False)
    assert all(p.is_meta for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(params, rel=2e-3)


def test_decode_rows_time_one_token_against_a_kv_cache(tiny_zoo, monkeypatch, capsys):
    """--decode: a causal LM generates one token per sequence after --seq cached tokens; that is
    faster than its 64-token prompt, and an encoder is refused by name before any compile."""
    name = "llama-tiny-test"
    monkeypatch.setitem(zoo.ZOO, name, zoo.ZooEntry(name, "causal-lm", zoo._hf(
        "LlamaForCausalLM", "LlamaConfig", hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=500), 64))
    prompt = bench.run_case(name, 4, None, "inf2.xlarge")
    token = bench.run_case(name, 4, None, "inf2.xlarge", decode=True, check_numerics=True)
    assert token.decode and token.seq == 64 and not prompt.decode
    assert 0 < token.latency_ms < prompt.latency_ms
    assert token.numerics["max_abs_error_over_output_scale"] < 0.02  # bf16 matmuls
    out = _run_cli(capsys, "bench", "--models", name, "--instances", "inf2.xlarge", "--batch",
                   "4", "--decode", "--seq", "32").out
    assert "context" in out and "tok/s" in out and "$ per 1M tok" in out
    row = next(line for line in out.splitlines() if name in line)
    assert row.split()[1:3] == ["4", "32"]
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--models", TINY, "--decode"])
    assert stop.value.code == 2
    assert "not a causal LM" in capsys.readouterr().err


def test_vision_rows_have_no_sequence_length(tiny_zoo, monkeypatch, capsys):
    """An image model's row says '-' for the sequence length (its input is a 224x224 image), and
    its patch embedding compiles (a patchify convolution is one matmul)."""
    name = "vit-tiny-test"
    monkeypatch.setitem(zoo.ZOO, name, zoo.ZooEntry(name, "vision", zoo._hf(
        "ViTModel", "ViTConfig", hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=128, image_size=224, patch_size=16)))
    result = bench.run_case(name, 1, None, "inf2.xlarge")
    assert result.seq is None and result.latency_ms > 0
    out = _run_cli(capsys, "bench", "--models", name, "--instances", "inf2.xlarge", "--batch",
                   "1").out
    row = next(line for line in out.splitlines() if name in line)
    assert row.split()[1:3] == ["1", "-"]


def test_cli_lnc_sets_the_logical_core_size_where_there_is_one(tiny_zoo, capsys):
    """--lnc 1 on trn2 shows twice the NeuronCores (copies) of the default LNC=2; inf2 has no
    logical NeuronCores and ignores it."""
    def copies(*extra):
        out = _run_cli(capsys, "bench", "--models", TINY, "--instances",
                       "trn2.48xlarge,inf2.xlarge", "--batch", "1", "--json", *extra).out
        return {r["instance"]: r["copies"] for r in json.loads(out)["results"]}

    default, single = copies(), copies("--lnc", "1")
    assert default["trn2.48xlarge"] == 64 and single["trn2.48xlarge"] == 128
    assert default["inf2.xlarge"] == single["inf2.xlarge"] == 2
    assert copies("--lnc", "2")["inf2.xlarge"] == 2


def test_an_lnc_the_chip_lacks_is_an_error():
    import torch

    import trnsim
    from trnsim.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="logical NeuronCore config 2"):
        trnsim.trace(torch.nn.Linear(8, 8), (torch.randn(2, 8),), instance="inf2.xlarge", lnc=2)


def test_cli_tp_splits_each_copy_over_that_many_cores(tiny_zoo, capsys, monkeypatch):
    """--tp 2 on trn1.32xlarge: half the copies (each takes two cores), and the title says so."""
    import importlib

    monkeypatch.setattr(importlib.import_module("trnsim.compiler.passes.tensor_parallel"),
                        "MIN_SHARD_BYTES", 0)  # the tiny model's weights would not be split

    def run(*extra):
        out = _run_cli(capsys, "bench", "--models", TINY, "--instances", "trn1.32xlarge",
                       "--batch", "1", "--json", *extra).out
        return json.loads(out)["results"][0]

    single, split = run(), run("--tp", "2")
    assert single["tensor_parallel"] == 1 and split["tensor_parallel"] == 2
    assert split["copies"] * 2 == single["copies"] == 32
    table = _run_cli(capsys, "bench", "--models", TINY, "--instances", "trn1.32xlarge",
                     "--batch", "1", "--tp", "2").out
    assert "2 NeuronCores (tensor parallel) per model" in table.replace("\n", " ")
