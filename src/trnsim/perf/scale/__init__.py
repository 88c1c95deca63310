"""Cluster-scale estimates (DESIGN.md's fourth path): one core's simulated share of a layer,
composed with the fabric model's collectives into a training step, a search over layouts, and
the inference figures of a deployment.

Public surface: `ModelSpec`/`resolve_model`, `System`/`parse_system`, `Layout`/`parse_layout`,
`Training`, `plan_training`, `search`, `plan_inference`.
"""

from trnsim.perf.scale.layout import Inference, Layout, Training, parse_layout
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.model import resolve as resolve_model
from trnsim.perf.scale.plan import TrainingPlan, plan_training
from trnsim.perf.scale.search import SearchResult, search
from trnsim.perf.scale.system import System, parse_system

__all__ = [
    "Inference",
    "Layout",
    "ModelSpec",
    "SearchResult",
    "System",
    "Training",
    "TrainingPlan",
    "parse_layout",
    "parse_system",
    "plan_training",
    "resolve_model",
    "search",
]
