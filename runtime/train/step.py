"""The step of a Python-API Trainer: `Trainer(run)` runs its batches on an execute.Step of
its own, whose Planner it makes here from `backend` or the run's `backend:` (unless it is
given one). The command line does not come here: it makes the Planner and the Step
itself and serves the Trainer's requests (cli/train.py), so its backend choice never
enters train/ (docs/ARCHITECTURE.md, "Choosing a backend").
"""
from __future__ import annotations

from ..execute import Step, cross_entropy, serve
from ..plan import Planner
from ..rescale import RescaleController

__all__ = ["RescaleController", "Step", "cross_entropy", "own_step", "serve"]


def own_step(run, parts, backend: str | None = None, planner=None) -> Step:
    """The Step of `run` (its assembled `parts`) on `planner`, else on a Planner of `backend`
    or the run's `backend:`."""
    if planner is None:
        planner = Planner(backend or run.backend, parts.algorithm, parts.device, run.scheduler)
    return Step(run, parts.model, parts.frozen, parts.algorithm, parts.device, planner)
