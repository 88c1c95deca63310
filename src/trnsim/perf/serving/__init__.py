"""LLM serving on simulated Neuron devices: token generation timed per step, continuous batching
simulated under a workload, and the pieces an HTTP server needs.

Step times come from trnsim's simulator (`steps.StepTimer`, the one module that compiles),
cached per (phase, batch, bucket); everything else composes them.
"""

from trnsim.perf.serving.generation import GenerationTiming, time_generation
from trnsim.perf.serving.models import ModelSource, resolve_model
from trnsim.perf.serving.scheduler import Replica, SchedulerConfig
from trnsim.perf.serving.simulate import SLO, ServingReport, simulate
from trnsim.perf.serving.steps import Deployment, StepCosts, StepTimer
from trnsim.perf.serving.workload import LengthDistribution, Request, read_trace, synthetic

__all__ = ["SLO", "Deployment", "GenerationTiming", "LengthDistribution", "ModelSource",
           "Replica", "Request", "SchedulerConfig", "ServingReport", "StepCosts", "StepTimer",
           "read_trace", "resolve_model", "simulate", "synthetic", "time_generation"]
