"""ExecutionPlan: stages hand values over by name, cores of a stage run together, copies load a
chip; the plan's shape figures (ranks, physical cores, logical cores)."""

import numpy as np

from tests.sim.helpers import builder, rng_array
from trnsim.isa import DmaCopy, TensorScalar
from trnsim.sim import (
    CoreSlot,
    ExecutionPlan,
    PlannedCore,
    TensorSpec,
    run_plan,
    run_plan_loaded,
    simulate,
    simulate_cores,
)


def _scale(factor: float, core: str = "v2"):
    """out = x * factor on one [128, 64] tile."""
    b = builder(core, "scale")
    x = b.input("x", (128, 64), "float32")
    out = b.output("out", (128, 64), "float32")
    tile = b.tile((128, 64), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()),
           TensorScalar(dst=tile, src=tile, op0="multiply", operand0=factor),
           DmaCopy(dst=out.block(), src=tile))
    return b.build()


SPEC = TensorSpec("x", (128, 64), "float32")


def test_pipeline_stages_hand_values_over_by_name():
    cores = [PlannedCore(program=0, slot=CoreSlot(group=0), stage=0, inputs=(("x", "x"),),
                         outputs=(("h", "out"),)),
             PlannedCore(program=1, slot=CoreSlot(group=1, lnc_index=1), stage=1,
                         inputs=(("h", "x"),), outputs=(("y", "out"),))]
    plan = ExecutionPlan("two", "inf2.xlarge", [_scale(2.0), lambda: _scale(3.0)], cores,
                         [SPEC], [TensorSpec("y", (128, 64), "float32")])
    x = rng_array((128, 64), "float32")
    run = run_plan(plan, {"x": x})
    np.testing.assert_array_equal(run.values["y"], x * 6)
    assert (plan.ranks, plan.physical, plan.logical_cores) == (1, 2, 2)
    alone = [simulate(_scale(f), mode="timing").profile.total_ns for f in (2.0, 3.0)]
    assert [p.total_ns for p in run_plan(plan, mode="timing").profiles] == alone
    assert len(run_plan_loaded(plan, 4, alone=run.profiles)) == 2  # one copy, stages streaming


def test_copies_of_a_one_core_plan_load_the_chip_as_simulating_them_together_does():
    plan = ExecutionPlan("one", "inf1.xlarge", [_scale(2.0, "v1")],
                         [PlannedCore(program=0, inputs=(("x", "x"),), outputs=(("y", "out"),))],
                         [SPEC], [TensorSpec("y", (128, 64), "float32")])
    alone = run_plan(plan, mode="timing").profiles
    loaded = run_plan_loaded(plan, 4, alone=alone)
    together = simulate_cores([_scale(2.0, "v1")] * 4, None, mode="timing", chip="inf1")
    assert [p.total_ns for p in loaded] == [r.profile.total_ns for r in together]
