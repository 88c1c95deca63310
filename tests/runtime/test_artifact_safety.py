"""Hostile and malformed `.trnsim` artifacts: each is a clean ArtifactError naming the file and the
field, and nothing a file names is ever imported or run.

Most cases re-seal the tampered artifact (fresh digests and checksum), as an attacker would: the
checks must hold on their own, not only because the checksum no longer matches.
"""

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
from trnsim.runtime import ArtifactError  # noqa: E402
from trnsim.runtime.artifact import manifest_checksum  # noqa: E402


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        return {"last_hidden_state": self.proj(x)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    x = torch.randn(2, 16)
    model = Encoder().eval()
    with pytest.MonkeyPatch.context() as patch:  # uncached, and only for this trace
        patch.setenv("TRNSIM_CACHE_DIR", "off")
        compiled = trnsim.trace(model, (x,), instance="inf2.xlarge")
    path = compiled.save(tmp_path_factory.mktemp("saved") / "enc.trnsim")
    return Path(path), x, model


@pytest.fixture
def art(saved, tmp_path):
    """A fresh copy of the saved artifact to tamper with."""
    copy = tmp_path / "art.trnsim"
    shutil.copytree(saved[0], copy)
    return copy


def manifest(path):
    return json.loads((path / "manifest.json").read_text())


def reseal(path, m=None, *, checksum=True):
    """Write manifest `m` with digests of the files it lists and a matching checksum."""
    m = manifest(path) if m is None else m
    for name in list(m.get("files", {})):
        file = path / name
        if file.is_file():
            m["files"][name] = hashlib.sha256(file.read_bytes()).hexdigest()
    m.pop("checksum", None)
    if checksum:
        m["checksum"] = manifest_checksum(m)
    (path / "manifest.json").write_text(json.dumps(m))


def edit(path, **changes):
    m = manifest(path)
    m.update(changes)
    reseal(path, m)


def test_a_saved_model_still_round_trips(saved):
    path, x, model = saved
    loaded = trnsim.load(path)
    out = loaded(x)
    assert torch.allclose(out["last_hidden_state"], model(x)["last_hidden_state"], atol=3e-2)
    assert manifest(path)["format"] == 3


# --- code execution through structure types ---------------------------------------------------
@pytest.mark.parametrize("target", ["os.system", "subprocess.getoutput", "builtins.open",
                                    "shutil.rmtree", "posix.system"])
def test_a_structure_type_is_never_imported_or_called(art, tmp_path, target):
    victim = tmp_path / "victim"
    victim.mkdir()
    marker = tmp_path / "ran"
    arguments = {"os.system": f"touch {marker}", "posix.system": f"touch {marker}",
                 "subprocess.getoutput": f"touch {marker}", "builtins.open": str(marker),
                 "shutil.rmtree": str(victim)}
    m = manifest(art)
    m["output_structure"] = {"kind": "model_output", "type": target, "keys": ["cmd", "mode"],
                             "children": [{"kind": "const", "value": arguments[target]},
                                          {"kind": "tensor"}]}
    reseal(art, m)
    with pytest.raises(ArtifactError, match=r"manifest\.json field 'output_structure\.type'"):
        trnsim.load(art)(torch.zeros(2, 16))
    assert not marker.exists() and victim.is_dir()


# --- malformed manifests --------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"[1, 2]", b"null", bytes(range(256)) * 4],
                         ids=["list", "null", "binary"])
def test_a_manifest_that_is_not_an_object(art, content):
    (art / "manifest.json").write_bytes(content)
    with pytest.raises(ArtifactError, match=r"manifest\.json"):
        trnsim.load(art)


def test_a_manifest_nested_100k_deep(art):
    text = json.dumps(manifest(art))
    deep = "[" * 100_000 + "]" * 100_000
    (art / "manifest.json").write_text(text[:-1] + f', "output_structure": {deep}}}')
    with pytest.raises(ArtifactError, match=r"manifest\.json: JSON nests 10000[01] levels"):
        trnsim.load(art)


@pytest.mark.parametrize("field,value,message", [
    ("options", {"optlevel": "two"}, r"field 'options\.optlevel' must be an integer"),
    ("options", {"lnc": 2.5}, r"field 'options\.lnc' must be an integer"),
    ("shards", 10**9, r"field 'shards' is 1000000000, outside"),
    ("shards", "4", r"field 'shards' must be an integer"),
    ("placement", [-1], r"field 'placement\[0\]' is -1, outside"),
    ("kernels", [{"label": 1}], r"field 'kernels\[0\]\.node' is missing"),
    ("sharded", ["no_such_weight"], r"field 'sharded\[0\]' 'no_such_weight' is not one of"),
    ("constants", [], r"field 'constants' must be an object"),
    ("surprise", 1, r"field 'manifest\.surprise' is not a field"),
    ("output_structure", {"kind": "closure"}, r"field 'output_structure\.kind' is str"),
    ("output_structure", {"kind": "tuple", "children": [{"kind": "tensor"}] * 3},
     r"field 'output_structure' holds 3 tensors, the model has 1"),
], ids=lambda v: str(v)[:20])
def test_a_field_of_the_wrong_type_or_size(art, field, value, message):
    m = manifest(art)
    m[field] = {**m[field], **value} if field == "options" else value
    reseal(art, m)
    with pytest.raises(ArtifactError, match=message):
        trnsim.load(art)


@pytest.mark.parametrize("change,message", [
    (lambda p: p["cores"][0].update(program=5), r"'plan\.cores\[0\]\.program' is 5, outside"),
    (lambda p: p["cores"][0]["slot"].update(rank=-1), r"'plan\.cores\[0\]\.slot\.rank' is -1"),
    (lambda p: p["cores"][0].update(shard=1), r"'plan\.cores\[0\]\.shard' is 1, outside"),
    (lambda p: p["cores"].clear(), r"'plan\.cores' is empty"),
    (lambda p: p["programs"][0].update(file="../program.json"),
     r"'plan\.programs\[0\]\.file' must be 'program\.json'"),
    (lambda p: p["programs"].append({"file": "program.p1.json", "constants": {}}),
     r"'plan\.programs\[1\]\.file' must be 'program\.p1\.json', a file the manifest lists"),
    (lambda p: p["programs"][0]["constants"].update(w="missing"),
     r"'plan\.programs\[0\]\.constants\.w' 'missing' is not a stored constant"),
    (lambda p: p.update(fabric={"instance": "p4d.24xlarge", "lnc": 1, "endpoints": [0],
                                "nodes": 1}), r"'plan\.fabric\.instance'"),
    (lambda p: p.update(fabric={"instance": "trn1.32xlarge", "lnc": 1, "endpoints": [0],
                                "nodes": 10**9}), r"'plan\.fabric\.nodes' is 1000000000"),
    (lambda p: p.update(lnc=3), r"'plan\.lnc' is 3, outside"),
    (lambda p: p.update(shared=["nowhere"]), r"'plan\.shared\[0\]' 'nowhere' is not a tensor"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_hostile_execution_plan(art, change, message):
    m = manifest(art)
    change(m["plan"])
    reseal(art, m)
    with pytest.raises(ArtifactError, match=message):
        trnsim.load(art)


def test_a_constant_spec_that_disagrees_with_the_program(art):
    m = manifest(art)
    key = next(iter(m["constants"]))
    m["constants"][key]["dtype"] = "float16"  # as many bytes as the bf16 weight, another dtype
    reseal(art, m)
    with pytest.raises(ArtifactError, match=rf"field 'constants\.{key}' does not declare"):
        trnsim.load(art)


@pytest.mark.parametrize("dims,message", [
    ([-2, 16], r"'inputs\[0\]\.shape\[0\]' is -2, outside"),
    ([2**50, 16], r"'inputs\[0\]\.shape\[0\]' is 1125899906842624, outside"),
    ([2**30, 2**30], r"'inputs\[0\]\.shape' \[1073741824, 1073741824\] holds"),
    ([2, 16.5], r"'inputs\[0\]\.shape\[1\]' must be an integer"),
])
def test_negative_huge_or_float_input_shapes(art, dims, message):
    m = manifest(art)
    m["inputs"][0]["shape"] = dims
    reseal(art, m)
    with pytest.raises(ArtifactError, match=r"manifest\.json field " + message):
        trnsim.load(art)


def test_a_manifest_shape_that_disagrees_with_the_program(art):
    m = manifest(art)
    m["inputs"][0]["shape"] = [3, 16]
    reseal(art, m)
    with pytest.raises(ArtifactError, match=r"field 'inputs\[0\]' says float32\[3, 16\]"):
        trnsim.load(art)


def test_a_manifest_without_checksums_is_refused(art):
    m = manifest(art)
    del m["files"]
    reseal(art, m)  # a consistent checksum over a manifest without file digests
    with pytest.raises(ArtifactError, match=r"field 'manifest\.files' is missing"):
        trnsim.load(art)
    reseal(art, {**m, "files": {"program.json": "0" * 64}})
    with pytest.raises(ArtifactError, match=r"field 'files\.constants\.safetensors' is missing"):
        trnsim.load(art)
    m = manifest(art)
    reseal(art, m, checksum=False)
    with pytest.raises(ArtifactError, match="does not match its checksum"):
        trnsim.load(art)


def test_an_edited_manifest_fails_its_checksum(art):
    m = manifest(art)
    m["name"] = "renamed"
    (art / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=r"manifest\.json does not match its checksum"):
        trnsim.load(art)


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_format_gets_a_version_error(art, version):
    m = manifest(art)
    m["format"] = version
    del m["checksum"]
    (art / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=f"artifact format {version}; this trnsim reads "
                                            f"format 3 only .*recompile the model"):
        trnsim.load(art)


# --- files outside the artifact, devices, FIFOs, links --------------------------------------------
@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "/dev/zero",
                                  "stage1/../../x.json", "program.json/../../../etc/passwd"])
def test_files_entries_outside_the_artifact(art, name):
    m = manifest(art)
    m["files"][name] = "0" * 64
    reseal(art, m)
    with pytest.raises(ArtifactError, match=r"field 'files\..*' is not a file a trnsim artifact"):
        trnsim.load(art)


def test_a_symlinked_program_is_refused(art, tmp_path):
    outside = tmp_path / "outside.json"
    shutil.copy(art / "program.json", outside)
    (art / "program.json").unlink()
    (art / "program.json").symlink_to(outside)
    reseal(art)  # the digest even matches the file the link leads to
    with pytest.raises(ArtifactError, match=r"program\.json (is a symbolic link|resolves outside)"):
        trnsim.load(art)


def test_a_constants_file_linked_to_dev_zero_is_refused(art):
    (art / "constants.safetensors").unlink()
    (art / "constants.safetensors").symlink_to("/dev/zero")
    with pytest.raises(ArtifactError, match=r"constants\.safetensors (is a symbolic link|resolves out)"):
        trnsim.load(art)


def test_a_fifo_does_not_hang_the_loader(art):
    (art / "constants.safetensors").unlink()
    os.mkfifo(art / "constants.safetensors")
    with pytest.raises(ArtifactError, match=r"constants\.safetensors is not a regular file"):
        trnsim.load(art)


def test_a_manifest_that_is_a_directory_or_symlink(art, tmp_path):
    (art / "manifest.json").rename(tmp_path / "real.json")
    (art / "manifest.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(ArtifactError, match=r"manifest\.json (is a symbolic link|resolves outside)"):
        trnsim.load(art)


# --- truncated or inconsistent data -----------------------------------------------------------------
def test_a_truncated_program(art):
    data = (art / "program.json").read_bytes()
    (art / "program.json").write_bytes(data[: len(data) // 2])
    reseal(art)
    with pytest.raises(ArtifactError, match=r"program\.json is not valid JSON"):
        trnsim.load(art)


def test_a_truncated_constants_file(art):
    data = (art / "constants.safetensors").read_bytes()
    (art / "constants.safetensors").write_bytes(data[:-10])
    reseal(art)
    with pytest.raises(ArtifactError,
                       match=r"constants\.safetensors (is truncated|field .*data_offsets.* outside)"):
        trnsim.load(art)


def test_a_huge_safetensors_header(art):
    data = (art / "constants.safetensors").read_bytes()
    (art / "constants.safetensors").write_bytes(struct.pack("<Q", 2**60) + data[8:])
    reseal(art)
    with pytest.raises(ArtifactError, match=r"constants\.safetensors field 'header' declares "
                                            r"1152921504606846976 bytes, over the limit"):
        trnsim.load(art)


def test_a_constant_whose_shape_does_not_match_its_bytes(art):
    program = json.loads((art / "program.json").read_text())
    constant = next(t for t in program["tensors"] if t["kind"] == "constant")
    constant["shape"] = [d * 2 for d in constant["shape"]]
    (art / "program.json").write_text(json.dumps(program))
    m = manifest(art)
    m["constants"][constant["name"]]["shape"] = constant["shape"]  # the declaration agrees
    reseal(art, m)
    with pytest.raises(ArtifactError, match=rf"constants\.safetensors field '{constant['name']}' "
                                            r"holds \d+ bytes; its shape"):
        trnsim.load(art)


@pytest.mark.parametrize("change,message", [
    (lambda p: p["instructions"][0].update(opcode="Exec"), r"'instructions\[0\]\.opcode' str"),
    (lambda p: p["instructions"][0]["fields"].update(__class__=1),
     r"'instructions\[0\]\.fields\.__class__' is not a field"),
    (lambda p: p.update(target="v9"), r"'target' unknown"),
    (lambda p: p["tensors"][0].update(kind="device"), r"'tensors\[0\]\.kind' is str"),
    (lambda p: p["tensors"][0].update(shape=[-1]), r"'tensors\[0\]\.shape\[0\]' is -1"),
    (lambda p: p.update(instructions={"a": 1}), r"'instructions' must be a list"),
], ids=["opcode", "field", "target", "kind", "shape", "instructions"])
def test_a_malformed_program(art, change, message):
    program = json.loads((art / "program.json").read_text())
    change(program)
    (art / "program.json").write_text(json.dumps(program))
    reseal(art)
    with pytest.raises(ArtifactError, match=r"program\.json field " + message):
        trnsim.load(art)


def test_a_program_that_reads_outside_its_tensors_fails_verification(art):
    program = json.loads((art / "program.json").read_text())
    for ins in program["instructions"]:
        for value in ins["fields"].values():
            if isinstance(value, dict) and "ap" in value and value["ap"][0] == "hbm":
                value["ap"][4] = 10**9  # the access pattern's offset
                break
        else:
            continue
        break
    (art / "program.json").write_text(json.dumps(program))
    reseal(art)
    with pytest.raises(ArtifactError, match=r"program\.json field 'instructions' is not a valid"):
        trnsim.load(art)
