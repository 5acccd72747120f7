"""The Plan of one graph: which backend runs each op and why, batch splitting, co-scheduling.

`build(graph, backends, device, scheduler)` makes the frozen Plan; a `Planner` holds the
backends of one choice, builds their plans with it and runs them. Both the Trainer's step
and `dsptrain plan` go through a Planner (the step's plans are also prepared on their
backends; `dsptrain plan` only reads them).

    plan.py        Plan (frozen) and Placement: an op's backend and why, its bytes, its scratch
    placement.py   place(): each op on the first backend that takes it (the rules below)
    rates.py       an op's modeled time on a processor: its product's measured rate (rate key)
    splitting.py   batch splitting: which products run in chunks of rows, and how many
    coschedule.py  co-scheduling's micro-batch count
    scratch.py     ScratchTable: the backends' scratch as numbers, for the memory fitter
    cache.py       PlanCache: plans by (batch, training), built once each
    building.py    build(): placement, then batch splitting and co-scheduling under the scheduler
    planner.py     the Planner: the backends of one choice; builds, prepares and runs their plans
"""

from .building import build
from .cache import PlanCache
from .coschedule import choose_micro_batches
from .placement import PLACEMENTS, cpu_only_pattern, place
from .plan import Placement, Plan
from .planner import Planner
from .scratch import ScratchTable
from .splitting import PRODUCT_HOOKS, splittable, working_set

__all__ = [
    "PLACEMENTS",
    "PRODUCT_HOOKS",
    "Placement",
    "Plan",
    "PlanCache",
    "Planner",
    "ScratchTable",
    "build",
    "choose_micro_batches",
    "cpu_only_pattern",
    "place",
    "splittable",
    "working_set",
]
