"""Source keys cited by the hardware presets, and where to read them.

Keys are short so presets stay readable; `describe(key)` expands one for `--verbose` output.
Paths under `hw/` and `ag/` are files of github.com/aws-neuron/aws-neuron-sdk (SDK 2.32,
2026-08-21), rendered at https://awsdocs-neuron.readthedocs-hosted.com/en/latest/<path>.html.
"""

from __future__ import annotations

_DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
_HW = "about-neuron/arch/neuron-hardware/"
_AG = "nki/guides/architecture/"

SOURCES: dict[str, str] = {
    "nc-v1": _DOCS + _HW + "neuron-core-v1.html",
    "nc-v2": _DOCS + _HW + "neuron-core-v2.html",
    "nc-v3": _DOCS + _HW + "neuron-core-v3.html",
    "nc-v4": _DOCS + _HW + "neuron-core-v4.html",
    "arch-trn1": _DOCS + _AG + "trainium_inferentia2_arch.html",
    "arch-trn2": _DOCS + _AG + "trainium2_arch.html",
    "arch-trn3": _DOCS + _AG + "trainium3_arch.html",
    "chip-inf1": _DOCS + _HW + "inferentia.html",
    "chip-inf2": _DOCS + _HW + "inferentia2.html",
    "chip-trn1": _DOCS + _HW + "trainium.html",
    "chip-trn2": _DOCS + _HW + "trainium2.html",
    "chip-trn3": _DOCS + _HW + "trainium3.html",
    "inst-inf1": _DOCS + _HW + "inf1-arch.html",
    "inst-inf2": _DOCS + _HW + "inf2-arch.html",
    "inst-trn1": _DOCS + _HW + "trn1-arch.html",
    "inst-trn2": _DOCS + _HW + "trn2-arch.html",
    "inst-trn3": _DOCS + _HW + "trn3-arch.html",
    "isa-legacy": _DOCS + "nki/api/nki.isa.html (legacy neuronxcc.nki docstrings, SDK 2.27)",
    "perf-guide": _DOCS + "nki/deep-dives/nki_perf_guide.html",
    "dma-overview": _DOCS + "nki/get-started/about/nki-dma-overview.html",
    "dma-bw-guide": _DOCS + "nki/deep-dives/nki-dma-bandwidth-guide.html",
    "dge": _DOCS + "nki/deep-dives/nki-dge.html",
    "mm-tutorial": _DOCS + "nki/guides/tutorials/matrix_multiplication.html",
    "direct-alloc": _DOCS + "nki/nki_direct_allocation_guide.html (SDK 2.27)",
    "data-types": _DOCS + "about-neuron/arch/neuron-features/data-types.html",
    "lnc": _DOCS + "about-neuron/arch/neuron-features/logical-neuroncore-config.html",
    "neuron-ls": _DOCS + "tools/neuron-sys-tools/neuron-ls.html",
    "ncc-evrf051": _DOCS + "compiler/error-codes/EVRF051.html",
    "ec2-instance-types": "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html "
                          "(accelerated computing: the processor of each instance family)",
    "explorer-troubleshooting": _DOCS + "tools/neuron-explorer/troubleshooting.html",
    "nrt-guide": _DOCS + "neuron-runtime/guides/nrt-developer-guide.html",
    "price-neuronperf": "aws-neuron-sdk src/neuronperf/src/neuronperf/benchmarking.py "
                        "_get_cost_per_hour (us-east-1)",
    "price-ri": "aws-neuron-sdk about-neuron/benchmarks/{inf2,trn1}/*_instance_prices.csv "
                "(RI-effective hourly rate)",
    "price-3p": "third-party public code agreeing on the on-demand rate (us-east-1); verify at "
                "https://aws.amazon.com/ec2/pricing/on-demand/",
    "price-usage-ai": "https://www.usage.ai/blogs/aws/ai-ml-cost/trainium-vs-gpu-instances/ (2026)",
    "launch-trn1": "AWS News Blog, Amazon EC2 Trn1 instances general availability (2022-10)",
    "launch-trn2": "AWS News Blog, Amazon EC2 Trn2 instances and Trn2 UltraServers (2024-12)",
}


def describe(key: str) -> str:
    """Expand a source key; free-text sources (and assumptions) are returned unchanged."""
    return SOURCES.get(key, key)
