"""The step a Trainer makes for itself: `Trainer(run)` runs its batches on an execute.Step
whose Planner it makes here from `backend` or the run's `backend:` (unless it is given a
Planner, or a Step: the command line makes both from --backend, cli/train.py).
"""

from __future__ import annotations

from ..execute import Step, cross_entropy
from ..plan import Planner
from ..rescale import RescaleController

__all__ = ["RescaleController", "Step", "cross_entropy", "own_step"]


def own_step(run, parts, backend: str | None = None, planner=None) -> Step:
    """The Step of `run` (its assembled `parts`) on `planner`, else on a Planner of `backend`
    or the run's `backend:`."""
    if planner is None:
        planner = Planner(backend or run.backend, parts.algorithm, parts.device, run.scheduler)
    return Step(run, parts.model, parts.frozen, parts.algorithm, parts.device, planner, parts.graph)
