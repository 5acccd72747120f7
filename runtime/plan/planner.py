"""The Planner: the backends of one run's choice, the plans it builds on them
(building.build), prepares them for, and runs."""

from __future__ import annotations

from ..backends import ACCELERATOR, select
from ..graph import TrainGraph, lower
from .building import build
from .cache import PlanCache
from .plan import Plan


class Planner:
    """The backends of one run's choice and the plans built on them; it runs the plans.

    Made from the choice (one of backends.CHOICES): the backend instances (backends.select),
    then for each model lowered at a batch size its Plan (`plan_model`), with every backend
    prepared for the ops it got; the executor that runs plans is its own. The command line
    hands its choice here (cli/train.py, cli/plan.py) and gives the Planner to an
    execute.Step, which asks it for plans and runs them through `run`; the Python API's
    Trainer makes its own Step and Planner from the run's `backend:` (train/step.py)."""

    def __init__(self, choice: str, algorithm, device=None, scheduler=None):
        from ..execute import Executor

        self.backends = select(choice)
        self.device, self.scheduler = device, scheduler
        self.executor = Executor(self.backends, algorithm)

    def build(self, graph: TrainGraph) -> Plan:
        """The Plan of `graph` on these backends, nothing prepared: what `dsptrain plan`
        reports (it runs nothing, so the DSP is not started); `plan` runs the same build."""
        return build(graph, self.backends, self.device, self.scheduler)

    def plan_model(
        self, model, recipe, batch: int, training: bool = True, frozen=frozenset(), prepare: bool = True
    ) -> Plan:
        """The Plan of `model` lowered by `recipe` (graph.lower) at `batch`; `frozen` layers get
        no gradient or update. `prepare`: its backends prepared (`plan`, a training step's),
        else only built (`build`, what `dsptrain plan` reports). The one place a run's model
        is lowered for planning, so the plan `dsptrain plan` prints is the step's."""
        graph = lower(model, recipe, batch, training, frozen)
        return self.plan(graph) if prepare else self.build(graph)

    def plans_for(self, model, recipe, frozen=frozenset(), lowered: TrainGraph | None = None) -> PlanCache:
        """The plans of `model` lowered by `recipe` by (batch, training), each built and
        prepared on first use (plan_model): a training run's (execute.Step). `lowered`: a
        graph of the model lowered already (train/assembly.py), planned as it is at its
        batch rather than lowered again."""

        def plan_at(batch: int, training: bool) -> Plan:
            if lowered is not None and (lowered.batch, lowered.training) == (batch, training):
                return self.plan(lowered)
            return self.plan_model(model, recipe, batch, training, frozen)

        return PlanCache(plan_at)

    def plan(self, graph: TrainGraph) -> Plan:
        """The Plan of `graph`, its backends prepared for the ops placed on them."""
        plan = self.build(graph)
        accelerator = self.backends.get(ACCELERATOR)
        if self.device is not None and hasattr(accelerator, "hvx_threads"):  # the profile's HVX contexts
            accelerator.hvx_threads = self.device.dsp.hvx_threads
        for name, backend in self.backends.items():
            backend.prepare(graph, [op for op in graph.ops if plan.backend_of(op) == name])
        return plan

    def run(self, plan: Plan, env: dict, ctx, **options) -> dict:
        """Run `plan` on `env` (execute.Executor.run and its options)."""
        return self.executor.run(plan, env, ctx, **options)

    def start_accelerator_clock(self) -> None:
        """Forget the accelerator's cost log so far (an evaluation's is not the next step's)."""
        take = getattr(self.backends.get(ACCELERATOR), "take_cost_log", None)
        if take is not None:
            take()

    def accelerator_seconds(self) -> float | None:
        """The accelerator's modeled time since start_accelerator_clock (cost.dsp_model_time);
        None without one that keeps a cost log."""
        from ..cost import dsp_model_time

        take = getattr(self.backends.get(ACCELERATOR), "take_cost_log", None)
        return dsp_model_time(self.device, *take()).seconds if take is not None else None

    def adopt_scratch(self, held: dict, option) -> dict:
        """Before a step of memory plan `option`, with the kept buffers at `held`: release
        every backend's scratch when `option` keeps some buffer smaller (memory.fit.must_release);
        returns what is held after the step. The release is made here, so the memory layer is
        handed sizes, never a backend."""
        from ..memory.fit import held_after, must_release

        if must_release(held, option):
            self.release_scratch()
            held = {}
        return held_after(held, option)

    def release_scratch(self) -> None:
        for backend in self.backends.values():
            backend.release_scratch()

    def close(self) -> None:
        self.executor.close()
        for backend in self.backends.values():
            backend.close()
