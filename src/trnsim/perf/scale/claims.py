"""`trnsim claims`: each quantitative claim of the Trainium launch material against trnsim's own
figure, with the command that prints that figure.

A claim about a spec is checked against the hardware catalog (`trnsim.hardware`), which cites
the documentation each figure comes from; a claim about speed needs a simulation and is
checked by a plan or a validate row (run with ``simulate=True``, minutes cold). A claim trnsim
has no means to check says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from trnsim import hardware

SEEDS = {
    "trn2-launch": "AWS News Blog, Trn2 instances and UltraServers (seeds/000)",
    "trn1-launch": "AWS China blog, Trn1 GA (seeds/001)",
    "trn2-announce": "Trainium2 announcement coverage, re:Invent 2023 (seeds/002)",
    "reinvent-2024": "re:Invent 2024 infrastructure coverage (seeds/003)",
    "inf2-blog": "AWS ML blog, Inferentia2 vs Inferentia1 (seeds/004)",
}


@dataclass
class ClaimRow:
    claim: str
    source: str
    claimed: str
    trnsim: str
    verdict: str  # "agrees", "differs", "not checked", "unsupported"
    command: str
    why: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _ratio_verdict(claimed: float, found: float, tolerance: float = 0.15) -> str:
    return "agrees" if abs(found / claimed - 1) <= tolerance else "differs"


def _spec_rows() -> list[ClaimRow]:
    trn1, trn2 = hardware.chip("trn1"), hardware.chip("trn2")
    inf1, inf2 = hardware.chip("inf1"), hardware.chip("inf2")
    i_trn1, i_trn2 = hardware.instance("trn1.32xlarge"), hardware.instance("trn2.48xlarge")
    us = hardware.instance("trn2-ultraserver")
    from trnsim.hardware.clusters import TRN2_ULTRACLUSTER

    show = "trnsim instances --json"
    rows = []
    bw = trn2.memory_bytes_per_s / trn1.memory_bytes_per_s
    rows.append(ClaimRow("Trn2 has 4x the memory bandwidth of Trn1", SEEDS["trn2-launch"],
                         "4x", f"{bw:.2f}x per chip ({trn2.memory_bytes_per_s / 1e12:.2f} vs "
                         f"{trn1.memory_bytes_per_s / 1e12:.2f} TB/s); instances "
                         f"{i_trn2.device_memory_bytes_per_s / i_trn1.device_memory_bytes_per_s:.2f}x",
                         _ratio_verdict(4, bw), show))
    cap = trn2.memory_bytes / trn1.memory_bytes
    rows.append(ClaimRow("Trn2 has 3x the memory capacity of Trn1", SEEDS["trn2-launch"], "3x",
                         f"{cap:.2f}x per chip (96 vs 32 GiB)", _ratio_verdict(3, cap), show))
    peak = i_trn2.peak_flops("bf16") / i_trn1.peak_flops("bf16")
    rows.append(ClaimRow("Trn2 instances train 4x faster than Trn1 (peak part)",
                         SEEDS["trn2-launch"], "4x",
                         f"{peak:.2f}x dense BF16 peak per instance (FP8 on Trn2: "
                         f"{i_trn2.peak_flops('fp8') / i_trn1.peak_flops('bf16'):.2f}x)",
                         _ratio_verdict(4, peak), show,
                         "a peak ratio, not a training time: see the simulated row below"))
    chip_tf = 65e18 / 100_000 / 1e12
    rows.append(ClaimRow("About 650 TFLOPS per Trainium2 chip (65 EF / 100,000 chips)",
                         SEEDS["trn2-announce"], f"{chip_tf:.0f} TFLOPS",
                         f"{trn2.peak_flops('bf16') / 1e12:.0f} TFLOPS dense BF16, "
                         f"{trn2.peak_flops('fp8') / 1e12:.0f} dense FP8",
                         _ratio_verdict(chip_tf, trn2.peak_flops("bf16") / 1e12), show,
                         "the 650 matches dense BF16, not FP8"))
    cluster = TRN2_ULTRACLUSTER.max_chips * trn2.peak_flops("bf16")
    rows.append(ClaimRow("65 ExaFLOPS from 100,000 Trainium2 chips", SEEDS["trn2-announce"],
                         "65 EF", f"{cluster / 1e18:.1f} EF dense BF16 "
                         f"({TRN2_ULTRACLUSTER.max_chips * trn2.peak_flops('fp8') / 1e18:.0f} "
                         "EF dense FP8)", _ratio_verdict(65, cluster / 1e18),
                         "trnsim plan 70B --system 'ultracluster trn2 x 100000' --layout TP16"))
    us_fp8 = us.peak_flops("fp8")
    rows.append(ClaimRow("83.2 PF of FP8 per Trn2 UltraServer", SEEDS["reinvent-2024"],
                         "83.2 PF", f"{us_fp8 / 1e15:.1f} PF dense FP8 (64 chips)",
                         _ratio_verdict(83.2, us_fp8 / 1e15, 0.02), show,
                         "seeds/000 calls the same 83.2 PF 'sparse' per instance; the chip "
                         "table's sparse figure gives "
                         f"{16 * trn2.peak_sparse_tflops / 1e3:.1f} PF per instance"))
    inst = i_trn2.peak_flops("fp8")
    rows.append(ClaimRow("20.8 PF dense FP8 per trn2.48xlarge", SEEDS["trn2-launch"], "20.8 PF",
                         f"{inst / 1e15:.1f} PF", _ratio_verdict(20.8, inst / 1e15, 0.02), show))
    hbm = us.device_memory_bytes_per_s / 1e12
    rows.append(ClaimRow("UltraServer: 6 TiB HBM at 185 TB/s", SEEDS["trn2-launch"],
                         "6 TiB, 185 TB/s", f"{us.device_memory_bytes / 2**40:.1f} TiB, "
                         f"{hbm:.1f} TB/s", _ratio_verdict(185, hbm, 0.02), show))
    cap2 = inf2.memory_bytes / inf1.memory_bytes
    bw2 = inf2.memory_bytes_per_s / inf1.memory_bytes_per_s
    rows.append(ClaimRow("Inferentia2: 4x memory capacity, 16.4x memory bandwidth of Inf1",
                         SEEDS["inf2-blog"], "4x, 16.4x", f"{cap2:.1f}x, {bw2:.1f}x",
                         "agrees" if abs(cap2 / 4 - 1) < 0.05 and abs(bw2 / 16.4 - 1) < 0.05
                         else "differs", show))
    rows.append(ClaimRow("Trn1 vs P4d: 1.4x BF16, 2.5x TF32, 5x FP32 TFLOPS, 4x network",
                         SEEDS["trn1-launch"], "1.4x / 2.5x / 5x / 4x",
                         f"trn1.32xlarge: {i_trn1.peak_flops('bf16') / 1e15:.2f} PF BF16, "
                         f"{i_trn1.peak_flops('fp32') / 1e15:.2f} PF FP32, "
                         f"{i_trn1.efa_bits_per_s / 1e9:.0f} Gbps EFA", "unsupported", show,
                         "trnsim's catalog has no GPU instances (P4d), so no ratio"))
    rows.append(ClaimRow("Trn1: up to 3.4 PF BF16 per instance", SEEDS["trn1-launch"], "3.4 PF",
                         f"{i_trn1.peak_flops('bf16') / 1e15:.2f} PF (16 chips x 190 TF, the "
                         "chip table)", _ratio_verdict(3.4, i_trn1.peak_flops("bf16") / 1e15,
                                                       0.05), show))
    return rows


SIMULATED: list[tuple[str, str, str, str, Callable[[], tuple[str, str]]]] = []


def _trn2_vs_trn1() -> tuple[str, str]:
    from trnsim.perf.scale import Training, parse_layout, parse_system, plan_training, resolve_model

    model = resolve_model("llama-3.2-1b")
    work = Training(2048, 64, 1, "mixed")
    one = plan_training(model, parse_system("trn1.32xlarge"), parse_layout("TP8"), work)
    two = plan_training(model, parse_system("trn2.48xlarge"), parse_layout("TP8"), work)
    ratio = two.tokens_per_s / one.tokens_per_s
    return f"{ratio:.2f}x tokens/s (llama-3.2-1b, TP8, seq 2048)", _ratio_verdict(4, ratio, 0.25)


def _inf2_vs_inf1() -> tuple[str, str]:
    from trnsim.perf.validate import predict_model

    base = {"name": "bert-large-uncased", "seq": "128", "dtype": ""}
    one = predict_model({**base, "instance": "inf1.xlarge", "batch": "1"})
    two = predict_model({**base, "instance": "inf2.xlarge", "batch": "1"})
    ratio = one / two
    return f"{ratio:.1f}x lower latency (BERT-large, batch 1, seq 128)", \
        _ratio_verdict(10, ratio, 0.3)


SIMULATED += [
    ("Trn2 trains 4x faster than Trn1 (simulated)", SEEDS["trn2-launch"], "4x",
     "trnsim plan llama-3.2-1b --system trn2.48xlarge --layout TP8 --seq 2048 --global-batch 64 "
     "(and --system trn1.32xlarge)", _trn2_vs_trn1),
    ("Inferentia2: 10x lower latency than Inferentia1", SEEDS["inf2-blog"], "10x",
     "trnsim validate --kinds model (rows seed-1, seed-2)", _inf2_vs_inf1),
]

UNCHECKED = [
    ClaimRow("Inferentia2: 4x higher throughput than Inferentia1", SEEDS["inf2-blog"], "4x",
             "-", "unsupported", "trnsim validate --kinds model",
             "the blog gives no throughput measurement to reproduce (which model, batch and "
             "instance); the latency rows it does give are checked above"),
    ClaimRow("A 300B-parameter model trains in weeks instead of months on 100,000 Trn2 chips",
             SEEDS["trn2-announce"], "weeks", "-", "unsupported",
             "trnsim plan 300B --system 'ultracluster trn2 x 100000' --layout 'TP16 PP8' "
             "--tokens 6e12",
             "no token count or layout is given; and a Trn2 layer's training step is simulated "
             "only with the training path's NeuronCore-v3 costs (run the command to see it)"),
]


def claims(simulate: bool = False,
           progress: Callable[[str], None] | None = None) -> list[ClaimRow]:
    rows = _spec_rows()
    for claim, source, claimed, command, check in SIMULATED:
        if not simulate:
            rows.append(ClaimRow(claim, source, claimed, "-", "not checked", command,
                                 "needs a simulation (minutes cold): trnsim claims --simulate"))
            continue
        if progress:
            progress(claim)
        try:
            figure, verdict = check()
        except Exception as error:  # a claim that cannot be simulated says why, not a traceback
            rows.append(ClaimRow(claim, source, claimed, "-", "unsupported", command,
                                 f"{type(error).__name__}: {error}"))
            continue
        rows.append(ClaimRow(claim, source, claimed, figure, verdict, command))
    return rows + UNCHECKED
