"""End-to-end latency: dispatch, then one DMA copy per input and per output over the host link."""

import pytest

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.runtime.host_time import host_time, ranks_host_time, tensor_bytes
from trnsim.sim.execution_plan import TensorSpec


def test_copies_pay_the_dma_start_latency_each_and_move_bytes_at_the_link_rate():
    spec = hardware.instance("inf2.xlarge")
    ids = TensorSpec("input_ids", (1, 128), "int32", "torch.int64")
    hidden = TensorSpec("out", (1, 128, 768), "float32", "torch.float32")
    host = host_time(spec, [ids, ids], [hidden])
    start = spec.chip.core.dma.start_latency_ns
    rate = spec.host.link_bytes_per_s
    assert host.input_bytes == 2 * 128 * 8  # int64 token ids as PyTorch holds them
    assert host.input_copy_ns == pytest.approx(2 * (start + 1024 / rate * 1e9))
    assert host.output_bytes == 128 * 768 * 4
    assert host.output_copy_ns == pytest.approx(start + 128 * 768 * 4 / rate * 1e9)
    assert host.total_ns == pytest.approx(spec.host.dispatch_ns + host.input_copy_ns
                                          + host.output_copy_ns)
    assert host.link == "PCIe Gen4 x16"


def test_a_slower_link_takes_longer_for_the_same_tensors():
    out = [TensorSpec("out", (10, 256, 1024), "float32")]
    inf1 = host_time(hardware.instance("inf1.xlarge"), [], out)
    inf2 = host_time(hardware.instance("inf2.xlarge"), [], out)
    assert inf1.output_copy_ns > 1.9 * (inf2.output_copy_ns - 1500)


def test_tensor_bytes_reads_the_pytorch_dtype_first():
    assert tensor_bytes(TensorSpec("x", (2, 3), "int32", "torch.int64")) == 48
    assert tensor_bytes(TensorSpec("x", (2, 3), "bfloat16")) == 12
    assert tensor_bytes(TensorSpec("x", (), "float32")) == 4


def test_ranks_on_one_chip_queue_on_its_link_while_chips_copy_side_by_side():
    spec = hardware.instance("inf2.48xlarge")
    start, rate = spec.chip.core.dma.start_latency_ns, spec.host.link_bytes_per_s
    host = ranks_host_time(spec, [1 << 20, 4], [2048], ranks=24, ranks_per_chip=2)
    assert host.input_bytes == 24 * ((1 << 20) + 4)
    assert host.output_bytes == 24 * 2048
    assert host.input_copy_ns == pytest.approx(2 * (2 * start + ((1 << 20) + 4) / rate * 1e9))
    assert host.output_copy_ns == pytest.approx(2 * (start + 2048 / rate * 1e9))
    # one rank a chip: each link carries one rank's copies
    alone = ranks_host_time(spec, [1 << 20, 4], [2048], ranks=12, ranks_per_chip=1)
    assert alone.input_copy_ns == pytest.approx(host.input_copy_ns / 2)


def test_more_ranks_a_chip_than_ranks_is_a_named_error():
    with pytest.raises(InvalidArgumentError, match="3 a chip"):
        ranks_host_time(hardware.instance("inf2.48xlarge"), [4], [4], ranks=2, ranks_per_chip=3)
