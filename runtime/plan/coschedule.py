"""Co-scheduling (Mandheling): how many micro-batches a step runs in flight across the DSP
and the CPU (execute/pipeline.py runs them)."""

from __future__ import annotations

from .plan import Plan


def choose_micro_batches(plan: Plan, scheduler, sliceable: bool) -> Plan:
    """`plan` with its micro-batch count (and why) for co-scheduling: `scheduler.micro_batches`
    when it is a number, else the device profile's cost model (cost.py). Only a `sliceable`
    step (training, a recipe whose requantizing ops take a given shift, so slices can share
    one: `graph.takes_given_shift`) is."""
    from ..cost import micro_batch_count

    batch = plan.graph.batch
    if not (scheduler.co_schedule and sliceable and batch >= 2):
        m, why = 1, "co-scheduling is off or does not apply"
    elif plan.pipeline_ops() is None:
        m, why = 1, "an op couples rows outside the update"
    elif scheduler.micro_batches != "auto":
        m, why = min(int(scheduler.micro_batches), batch), f"scheduler.micro_batches: {scheduler.micro_batches}"
    else:
        m, why = micro_batch_count(plan.pipeline_work(), plan.device, batch)
    return plan.replace(micro_batches=m, micro_batches_reason=why)
