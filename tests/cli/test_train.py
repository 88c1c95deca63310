"""`trnsim train`: bad requests are one-line errors before any model is built (the training
itself runs in tests/runtime/test_xla.py, in subprocesses)."""

import pytest

from trnsim.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


@pytest.mark.parametrize("argv,message", [
    (("--model", "bert-huge"), "unknown training model 'bert-huge'"),
    (("--optimizer", "lamb"), "unknown optimizer 'lamb'"),
    (("--dtype", "fp8"), "dtype 'fp8'"),
    (("--micro-batch", "0"), "micro_batch must be at least 1, got 0"),
    (("--instance", "trn9.big"), "unknown instance"),
])
def test_bad_requests_are_named(capsys, argv, message):
    code, _, err = run(capsys, "train", *argv)
    assert code == 2
    assert message in err


def test_shapes_only_with_tensorboard_is_refused(capsys):
    code, _, err = run(capsys, "train", "--shapes-only", "--tensorboard", "runs")
    assert code == 2 and "--shapes-only does not compute" in err
