"""EC2 UltraClusters: how many chips of a generation AWS deploys on one non-blocking EFA network.

An UltraCluster is a number of instances of one type on a petabit-scale, non-blocking EFA
fabric; trnsim models it as `nodes` copies of the member instance (each instance's EFA is its
cluster bandwidth). What is here is the documented scale, so a plan or a claim can say how far
a cluster of that generation goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.hardware.spec import Spec, cite

TRN1_LAUNCH = "https://aws.amazon.com/blogs/aws/amazon-ec2-trn1-instances-for-high-performance-model-training-are-now-available/"
TRN2_ANNOUNCE = ("AWS re:Invent 2023 Trainium2 announcement (seeds/002): Trn2 instances scale out "
                 "to up to 100,000 Trainium2 chips in EC2 UltraClusters, up to 65 EFLOPS")


@dataclass(frozen=True, kw_only=True)
class UltraClusterSpec(Spec):
    name: str
    member: str  # the instance type the cluster is built of
    max_chips: int
    network: str  # what joins the instances


TRN1_ULTRACLUSTER = UltraClusterSpec(
    name="trn1-ultracluster", member="trn1n.32xlarge", max_chips=30_000,
    network="EFA v2, non-blocking petabit-scale",
    sources=cite(max_chips=f"{TRN1_LAUNCH} (Trn1 UltraClusters: up to 30,000 Trainium chips)",
                 network=f"{TRN1_LAUNCH} (non-blocking petabit-scale network, 800/1600 Gbps EFA "
                         "per instance)"),
)
TRN2_ULTRACLUSTER = UltraClusterSpec(
    name="trn2-ultracluster", member="trn2.48xlarge", max_chips=100_000,
    network="EFA v3, non-blocking petabit-scale",
    sources=cite(max_chips=TRN2_ANNOUNCE,
                 network="seeds/000 (Trn2 in EC2 UltraClusters: tens of thousands of chips on "
                         "one non-blocking petabit-scale network); 3.2 Tbps EFA v3 per instance"),
)
ULTRACLUSTERS: dict[str, UltraClusterSpec] = {
    "trn1": TRN1_ULTRACLUSTER, "trn1n": TRN1_ULTRACLUSTER, "trn2": TRN2_ULTRACLUSTER,
}
