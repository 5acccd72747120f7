"""build(): a graph's Plan under the run's scheduler: placement, batch splitting's switch,
co-scheduling's micro-batch count."""

from __future__ import annotations

from ..backends import ACCELERATOR
from ..graph import TrainGraph
from .coschedule import choose_micro_batches
from .placement import place
from .plan import Plan


def build(graph: TrainGraph, backends: dict, device=None, scheduler=None) -> Plan:
    """The Plan of `graph` on `backends` (name -> Backend, priority order) for `device` (a
    config.DeviceProfile) under `scheduler` (config.SchedulerConfig; None: place each op
    on the first backend that takes it, no splitting, no co-scheduling).

    Co-scheduling needs the accelerator among the backends (a second processor to overlap);
    batch splitting and micro-batches need slices that can share a shift
    (`graph.takes_given_shift`), micro-batches a training graph."""
    if scheduler is None:
        return place(graph, backends, device=device)
    co_schedule = scheduler.co_schedule and ACCELERATOR in backends
    plan = place(graph, backends, co_schedule=co_schedule, device=device, placement=scheduler.placement)
    plan = plan.replace(device=device, batch_split=scheduler.batch_split and graph.takes_given_shift)
    # Co-scheduling's micro-batch count: the device profile's cost model (cost.py); 1
    # (serial) without the accelerator, where there is no second processor to overlap.
    return choose_micro_batches(plan, scheduler, graph.training and graph.takes_given_shift)
