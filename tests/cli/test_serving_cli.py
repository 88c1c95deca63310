"""`trnsim generate` and `trnsim serve --simulate` from the command line (a tiny Llama config)."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trnsim.cli import main

CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 96, "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2}


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "tiny-llama.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def test_generate_times_prefill_and_each_decode_bucket(capsys, config):
    code, out, err = run(capsys, "generate", config, "--input-tokens", "100",
                         "--output-tokens", "60", "--max-length", "256", "--json")
    assert code in (0, None), err
    data = json.loads(out)
    assert data["prefill_bucket"] == 128
    # tokens 2..60 write positions 101..159: 28 steps at bucket 128, 31 at 256
    assert {int(k): v["steps"] for k, v in data["by_bucket"].items()} == {128: 28, 256: 31}
    steps = {int(k): v["ms"] for k, v in data["by_bucket"].items()}
    assert data["e2e_ms"] == pytest.approx(data["ttft_ms"] + 28 * steps[128] + 31 * steps[256])
    assert data["tokens_per_s"] == pytest.approx(60 / (data["e2e_ms"] / 1e3))
    assert data["usd_per_million_tokens"] > 0


def test_generate_with_int8_weights(capsys, config):
    """--quantize int8: the steps compile with int8 linear weights (a deployment of its own in
    the step cache); an unknown weight dtype is a clean error."""
    code, out, err = run(capsys, "generate", config, "--input-tokens", "100", "--output-tokens",
                         "4", "--max-length", "128", "--quantize", "int8", "--json")
    assert code in (0, None), err
    data = json.loads(out)
    assert data["quantize"] == "int8" and data["ttft_ms"] > 0 and data["tpot_ms"] > 0
    code, _, err = run(capsys, "generate", config, "--output-tokens", "4", "--quantize", "int4")
    assert code == 2 and "int8" in err


def test_generate_refuses_a_sequence_past_the_model(capsys, config):
    code, _, err = run(capsys, "generate", config, "--input-tokens", "200", "--output-tokens",
                       "100")
    assert code == 2 and "max_position_embeddings" in err


def test_serve_simulate_reports_latency_percentiles(capsys, config):
    code, out, err = run(capsys, "serve", config, "--simulate", "--rate", "20", "--requests",
                         "300", "--input-tokens", "uniform:20:100", "--output-tokens", "30",
                         "--max-num-seqs", "4", "--slo-ttft-ms", "1", "--slo-tpot-ms", "1",
                         "--json")
    assert code in (0, None), err
    data = json.loads(out)
    assert data["requests"] == 300
    assert data["ttft_ms"]["p50"] <= data["ttft_ms"]["p99"]
    assert data["tpot_ms"]["p50"] > 0 and data["itl_ms"]["p99"] >= data["itl_ms"]["p50"]
    assert 0 < data["kv_cache_peak_use"] <= 1
    assert data["goodput_requests_per_s"] <= data["throughput_requests_per_s"] + 1e-9


def test_serve_needs_simulate_or_port(capsys, config):
    code, _, err = run(capsys, "serve", config)
    assert code == 2 and "--simulate or --port" in err
    code, _, err = run(capsys, "serve", config, "--simulate", "--workload", "chat")
    assert code == 2 and "neuron-vllm" in err


def test_serve_plot_writes_a_png_with_one_point_per_rate(capsys, config, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "load.png"
    code, out, err = run(capsys, "serve", config, "--simulate", "--rate", "20", "--requests",
                         "60", "--input-tokens", "uniform:20:100", "--output-tokens", "30",
                         "--max-num-seqs", "4", "--plot", str(path), "--plot-rates", "5,2000",
                         "--json")
    assert code in (0, None), err
    data = json.loads(out)
    assert [p["rate"] for p in data["plot"]["points"]] == [5.0, 2000.0]
    light, heavy = data["plot"]["points"]
    # 2000/s is past what 4 sequences of 30 tokens at ~0.3 ms a step can hold (~500/s): requests
    # queue. (At 40/s both rates are light and p99 of 60 requests is where an arrival meets a
    # decode step: noise, not load.)
    assert light["ttft_ms"]["p99"] < heavy["ttft_ms"]["p99"]  # more load, no faster answer
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_serve_search_lists_layouts_cheapest_first(capsys, config):
    code, out, err = run(capsys, "serve", config, "--simulate", "--search", "--rate", "5",
                         "--requests", "40", "--input-tokens", "50", "--output-tokens", "10",
                         "--layouts", "trn1.2xlarge:1,inf2.xlarge:1", "--slo-ttft-ms", "1000",
                         "--slo-tpot-ms", "1000", "--json")
    assert code in (0, None), err
    rows = json.loads(out)["candidates"]
    assert [(r["instance"], r["meets"], r["instances"]) for r in rows] == \
        [("inf2.xlarge", True, 1), ("trn1.2xlarge", True, 1)]  # both meet loose targets


def test_serve_speculative_decoding_with_a_draft_model(capsys, config):
    common = ("serve", config, "--simulate", "--rate", "5", "--requests", "20",
              "--input-tokens", "40", "--output-tokens", "41", "--max-num-seqs", "2", "--json")
    code, out, err = run(capsys, *common)
    assert code in (0, None), err
    plain = json.loads(out)
    code, out, err = run(capsys, *common, "--draft-model", config, "--speculation-length", "3",
                         "--acceptance-rate", "1.0")
    assert code in (0, None), err
    spec = json.loads(out)
    assert spec["draft_model"] and spec["extra"]["speculation"] == 3
    # every draft accepted: 4 tokens an iteration, so the 40 decode tokens of each request
    # take 10 iterations instead of 40
    prefills = 20
    assert (spec["iterations"] - prefills) * 4 <= plain["iterations"] - prefills
    code, _, err = run(capsys, *common, "--draft-model", config, "--chunked-prefill")
    assert code == 2 and "chunked prefill" in err
