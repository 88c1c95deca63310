"""`trnsim validate`: model, kernel and collective rows predicted; malformed rows reported."""

import csv
import json

import pytest

from trnsim.cli import main
from trnsim.errors import TrnsimError
from trnsim.perf import validate as v

COLUMNS = list(v.COLUMNS)


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in COLUMNS})
    return path


def row(id, kind, name, instance, value, unit, **extra):
    return {"id": id, "kind": kind, "name": name, "instance": instance, "value": value,
            "unit": unit, "metric": "latency", **extra}


def test_the_calibration_set_ships_with_the_package():
    rows = v.read_rows(v.default_csv())
    ids = {r["id"] for r in rows}
    assert {f"seed-{i}" for i in range(1, 9)} <= ids and "nki-matmul-optimized" in ids


def test_missing_columns_are_a_clear_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,name\nx,y\n")
    with pytest.raises(TrnsimError, match="missing column"):
        v.read_rows(path)


def test_malformed_rows_are_reported_not_fatal(tmp_path):
    path = write_csv(tmp_path / "m.csv", [
        row("not-a-number", "model", "bert-large-uncased", "inf2.xlarge", "n/a", "ms"),
        row("odd-kind", "power", "x", "inf2.xlarge", "1", "W"),
        row("not-time", "model", "bert-large-uncased", "inf2.xlarge", "5", "GB/s"),
        row("unknown-model", "model", "llama-9000", "inf2.xlarge", "5", "ms", batch="1"),
        row("unknown-kernel", "kernel", "a fused softmax", "trn1.32xlarge", "1", "ms"),
        row("no-size", "collective", "all-reduce", "trn1.32xlarge", "60", "us", cores="2"),
        row("bad-instance", "collective", "all-reduce", "trn9.huge", "60", "us", cores="2",
            notes="1MiB"),
    ])
    results = {r.id: r for r in v.validate(path)}
    assert all(r.status == "skipped" and r.predicted is None for r in results.values())
    assert "not a number" in results["not-a-number"].reason
    assert "unknown kind 'power'" in results["odd-kind"].reason
    assert "'GB/s' is not one model rows are predicted in" in results["not-time"].reason
    assert "llama-9000" in results["unknown-model"].reason
    assert "no kernel" in results["unknown-kernel"].reason
    assert "message size" in results["no-size"].reason
    assert "trn9.huge" in results["bad-instance"].reason
    assert v.mape(list(results.values())) is None


def test_collective_and_kernel_rows_are_predicted(tmp_path):
    path = write_csv(tmp_path / "k.csv", [
        row("ar-1GiB", "collective", "all-reduce", "trn1.32xlarge", "18930", "us", cores="2",
            dtype="fp32"),
        row("ar-1GiB-ms", "collective", "all-reduce", "trn1.32xlarge", "18.93", "ms", cores="2",
            dtype="fp32"),
        row("mm", "kernel", "tiled matmul, fully optimized NKI tutorial kernel "
            "([2048,1024] @ [1024,1024])", "trn1.32xlarge", "0.1", "ms", dtype="bf16"),
    ])
    results = {r.id: r for r in v.validate(path)}
    one_gib = results["ar-1GiB"]
    assert one_gib.status == "ok" and one_gib.predicted == pytest.approx(18930, rel=0.01)
    # the same prediction in another unit
    assert results["ar-1GiB-ms"].predicted == pytest.approx(one_gib.predicted / 1e3)
    mm = results["mm"]
    # 2*2048*1024*1024 FLOP at <= 91.8 TFLOPS is >= 46.8 us
    assert mm.status == "ok" and 0.0468 <= mm.predicted < 0.5
    assert mm.error_pct == pytest.approx(100 * (mm.predicted - 0.1) / 0.1)
    errors = [abs(r.error_pct) for r in results.values()]
    assert v.mape(list(results.values())) == pytest.approx(sum(errors) / 3)
    assert v.mape(list(results.values()), "kernel") == pytest.approx(abs(mm.error_pct))


USER_KERNEL = """
from neuronxcc import nki
import neuronxcc.nki.language as nl


@nki.jit
def add_tiles(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.add(x, y))
    return out
"""


def test_kernel_rows_name_a_users_kernel_file_or_module(tmp_path):
    (tmp_path / "my_kernels.py").write_text(USER_KERNEL)
    path = write_csv(tmp_path / "k.csv", [
        row("file", "kernel", "my_kernels.py::add_tiles 512x2048,512x2048", "trn1.2xlarge",
            "0.01", "ms", dtype="bf16"),
        row("bigger", "kernel", "my_kernels.py::add_tiles 2048x2048,2048x2048", "trn1.2xlarge",
            "0.01", "ms", dtype="fp32"),
        row("module", "kernel", "trnsim.kernels.tutorials::matmul_optimized 1024x2048,1024x1024",
            "trn1.32xlarge", "0.1", "ms", dtype="bf16"),
        row("library", "kernel", "tiled matmul, fully optimized NKI tutorial kernel "
            "([2048,1024] @ [1024,1024])", "trn1.32xlarge", "0.1", "ms", dtype="bf16"),
        row("no-shapes", "kernel", "my_kernels.py::add_tiles", "trn1.2xlarge", "1", "ms"),
        row("no-file", "kernel", "missing.py::k 128x128", "trn1.2xlarge", "1", "ms"),
        row("no-kernel", "kernel", "my_kernels.py::mul_tiles 128x128", "trn1.2xlarge", "1", "ms"),
    ])
    results = {r.id: r for r in v.validate(path)}
    assert results["file"].status == "ok" and results["file"].predicted > 0
    # 16x the bytes (4x rows, fp32 not bf16) of a DMA-bound kernel takes longer
    assert results["bigger"].predicted > 4 * results["file"].predicted
    # the library's kernel named by module and by description is the same kernel
    assert results["module"].predicted == pytest.approx(results["library"].predicted)
    assert "input shapes" in results["no-shapes"].reason
    assert "missing.py" in results["no-file"].reason
    assert "mul_tiles" in results["no-kernel"].reason


def test_model_row_runs_through_the_compiler(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from trnsim.perf import zoo

    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(zoo.ZOO, "bert-tiny-test", zoo.ZooEntry(
        "bert-tiny-test", "text", zoo._hf("BertModel", "BertConfig", hidden_size=128,
                                          num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=256, vocab_size=3000), 32))
    path = write_csv(tmp_path / "model.csv", [
        row("tiny", "model", "bert-tiny-test", "inf2.xlarge", "0.2", "ms", batch="2", seq="32"),
        row("tiny-inf1", "model", "bert-tiny-test", "inf1.xlarge", "2", "ms", batch="1"),
    ])
    results = {r.id: r for r in v.validate(path)}
    assert results["tiny"].status == "ok" and results["tiny"].predicted > 0
    assert results["tiny-inf1"].status == "ok"
    out = _cli_json(["validate", str(path), "--json"])
    assert {r["id"] for r in out["rows"]} == {"tiny", "tiny-inf1"}
    assert out["mape_pct"]["model"] == pytest.approx(v.mape(list(results.values())))
    assert out["mape_pct"]["kernel"] is None


def _cli_json(argv):
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            main(argv)
        except SystemExit as stop:
            assert stop.code in (0, None)
    return json.loads(buffer.getvalue())


def test_field_semantics_of_real_measurement_files():
    assert v.leading_int({"seq": "128 (assumed)"}, "seq") == 128
    assert v.leading_int({"seq": "224²"}, "seq") == 224
    assert v.leading_int({"seq": "224x224"}, "seq") == 224
    assert v.leading_int({"seq": ""}, "seq", 7) == 7
    with pytest.raises(TrnsimError, match="seq 'long' does not start with a whole number"):
        v.leading_int({"seq": "long"}, "seq")
    # the dtype names the model's type; casting changes only when the text says so
    assert v.auto_cast_of("") == (None, "bf16")
    assert v.auto_cast_of("fp32") == (None, "bf16")  # inf1 keeps neuron-cc's default cast
    assert v.auto_cast_of("fp32 with matmuls auto-cast to bf16") == ("matmult", "bf16")
    assert v.auto_cast_of("fp32, matmuls auto-cast to fp16") == ("matmult", "fp16")
    assert v.auto_cast_of("fp32 (--auto-cast none)") == ("none", "bf16")
    assert v.auto_cast_of("fp32, no auto-cast") == ("none", "bf16")
    assert v.auto_cast_of("bf16") == ("all", "bf16")
    assert v.auto_cast_of("fp16") == ("all", "fp16")
    assert v.auto_cast_of("fp32 --auto-cast all") == ("all", "bf16")


def test_collective_rows_honour_nodes_and_a_named_algorithm():
    base = {"name": "all-reduce", "instance": "trn1.32xlarge", "dtype": "fp32", "notes": "4MiB"}
    assert v.collective_algorithm({**base, "notes": "the example shows the KangaRing "
                                   "algorithm"}) == "kangaring"
    assert v.collective_algorithm({**base, "algorithm": "ring"}) == "ring"
    assert v.collective_algorithm({**base, "notes": "a fast algorithm"}) is None
    one_host = v.predict_collective({**base, "cores": "32"})
    two_hosts = v.predict_collective({**base, "cores": "32", "nodes": "2"})
    assert two_hosts > one_host  # half the ranks per host, and EFA between them
    ring = v.predict_collective({**base, "cores": "32", "algorithm": "ring"})
    assert ring != v.predict_collective({**base, "cores": "32", "algorithm": "mesh"})


def test_kinds_are_a_table_other_kinds_extend(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "t.csv", [
        row("train", "training", "bert-large-uncased", "trn1.32xlarge", "3826.6", "seq/s"),
        row("gen", "generation", "llama-2-7b", "inf2.48xlarge", "6.47", "ms"),
    ])
    results = {r.id: r for r in v.validate(path)}
    # training rows are predicted by the planner when asked for (they simulate layers first)
    assert results["train"].status == "skipped" and "--kinds training" in results["train"].reason
    monkeypatch.setitem(v.KINDS, "training", v.RowKind(
        "training", lambda row: 2000.0, "seq/s", {"seq/s": 1.0, "seq/min": 60.0}))
    results = {r.id: r for r in v.validate(path)}
    assert results["train"].predicted == 2000.0
    assert results["train"].error_pct == pytest.approx(100 * (2000 - 3826.6) / 3826.6)


TINY_BERT = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 64,
             "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128,
             "vocab_size": 3000, "max_position_embeddings": 64}
TINY_VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"],
            "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 128, "image_size": 32, "patch_size": 16}


def test_model_rows_name_configs_and_ignore_a_vision_rows_seq(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tiny-bert.json").write_text(json.dumps(TINY_BERT))
    (tmp_path / "tiny-vit.json").write_text(json.dumps(TINY_VIT))
    elsewhere = tmp_path / "configs" / "tiny-user"
    elsewhere.mkdir(parents=True)
    (elsewhere / "config.json").write_text(json.dumps(TINY_BERT))
    path = write_csv(tmp_path / "m.csv", [
        row("bert", "model", "tiny-bert.json", "inf2.xlarge", "0.2", "ms", batch="1",
            seq="32 (assumed)"),
        row("vit", "model", "tiny-vit.json", "inf2.xlarge", "0.2", "ms", batch="1", seq="224²"),
        row("user", "model", "someone/tiny-user", "inf2.xlarge", "0.2", "ms", batch="1",
            seq="32"),
        row("bad-seq", "model", "tiny-bert.json", "inf2.xlarge", "0.2", "ms", seq="long"),
    ])
    results = {r.id: r for r in v.validate(path, configs=(str(elsewhere / "config.json"),))}
    assert results["bert"].status == "ok" and results["bert"].predicted > 0
    assert results["vit"].status == "ok" and results["vit"].predicted > 0
    assert results["user"].predicted == pytest.approx(results["bert"].predicted)
    assert results["bad-seq"].status == "skipped" and "seq 'long'" in results["bad-seq"].reason


def test_names_resolve_against_the_offline_config_set():
    from trnsim.errors import InvalidArgumentError, UnknownNameError
    from trnsim.perf import zoo

    assert zoo.zoo_model("roberta-base").family == "text"
    assert zoo.zoo_model("electra-base").name == "electra-base-discriminator"
    assert zoo.zoo_model("google/electra-base-discriminator").token_types
    assert zoo.zoo_model("openai-community/gpt2-medium").family == "causal-lm"
    assert zoo.zoo_model("microsoft/resnet-101").family == "vision"
    assert zoo.zoo_model("bert-base-cased").name == "bert-base-cased"
    # the zoo's own entries come first
    assert zoo.zoo_model("google-bert/bert-large-uncased") is zoo.ZOO["bert-large-uncased"]
    with pytest.raises(InvalidArgumentError, match="ambiguous"):
        zoo.zoo_model("bert-base")
    with pytest.raises(UnknownNameError, match="llama-9000"):
        zoo.zoo_model("llama-9000")
    fields = json.loads(zoo.shipped_configs()["gpt2-medium"].read_text())
    assert (fields["n_embd"], fields["n_layer"], fields["n_head"]) == (1024, 24, 16)


def test_the_tutorial_variants_are_named_by_rows():
    from trnsim.kernels import tutorials

    def named(text):
        return tutorials.named_matmul(f"tiled matmul, {text} NKI tutorial kernel")

    assert named("naive") is tutorials.matmul_naive
    assert named("hoisted loads") is tutorials.matmul_hoisted
    assert named("blocked free dimension") is tutorials.matmul_block_free_dim
    assert named("fully optimized") is tutorials.matmul_optimized
    assert tutorials.named_matmul("a fused softmax") is None


def test_model_rows_compile_as_their_sdk_did():
    row_ = {"source": "aws-neuron-sdk about-neuron/benchmarks/inf2 (SDK 2.26)"}
    assert v.model_type_of(row_) == "transformer"  # torch-neuronx's default from 2.14
    assert v.model_type_of({"source": "Neuron SDK 2.12 benchmark"}) == "generic"
    assert v.model_type_of({"source": "a 2023 blog"}) is None  # no SDK: trnsim's default
    assert v.model_type_of({"model_type": "generic", "source": "SDK 2.26"}) == "generic"
    with pytest.raises(TrnsimError, match="model_type 'bert'"):
        v.model_type_of({"model_type": "bert"})
    # a row naming no SDK: trnsim's default, or that of the SDK the user assumes for such rows
    assert v.model_type_of({"source": "a blog"}) is None
    assert v.model_type_of({"source": "a blog", "_assumed_sdk": "2.10"}) == "generic"
    assert v.model_type_of({"source": "a blog", "_assumed_sdk": "2.14"}) == "transformer"
    assert v.model_type_of({"source": "SDK 2.26", "_assumed_sdk": "2.10"}) == "transformer"
    with pytest.raises(TrnsimError, match="assume_sdk='latest'"):
        v.validate(kinds=("model",), assume_sdk="latest")


def test_rows_selects_by_id_and_names_an_unknown_one(tmp_path, monkeypatch, capsys):
    path = write_csv(tmp_path / "r.csv", [
        row("ar", "collective", "all-reduce", "trn1.32xlarge", "60", "us", cores="2",
            notes="1MiB"),
        row("train", "training", "bert-large-uncased", "trn1.32xlarge", "3826.6", "seq/s"),
        row("other", "collective", "all-gather", "trn1.32xlarge", "60", "us", cores="2",
            notes="1MiB"),
    ])
    monkeypatch.setitem(v.KINDS, "training", v.RowKind(
        "training", lambda row: 2000.0, "seq/s", {"seq/s": 1.0}, by_default=False))
    # a row named by id is predicted even when its kind is not predicted by default
    results = v.validate(path, ids={"train", "ar"})
    assert [r.id for r in results] == ["ar", "train"]
    assert all(r.status == "ok" for r in results) and results[1].predicted == 2000.0
    with pytest.raises(TrnsimError, match=r"unknown row id.*'trian'.*did you mean 'train'"):
        v.validate(path, ids={"trian"})
    data = _cli_json(["validate", str(path), "--rows", "other", "--json"])
    assert [r["id"] for r in data["rows"]] == ["other"] and data["rows"][0]["predicted"] > 0
    with pytest.raises(SystemExit):
        main(["validate", str(path), "--rows", "ar,nope"])
    assert "unknown row id (in r.csv) 'nope'" in capsys.readouterr().err
