"""One training step and what it needs: the plans of the Planner it is given (plan.py:
it holds the backends, builds their plans and runs them), and the memory budget with its
arena. The Trainer (train/loop.py: epochs, metrics, checkpoints) holds one and calls it:
`train(state, images, labels, step, epoch, seed, energy_meter, rescale)` for a batch,
`predict(...)` for scores, `check_budget(batch)` before training.

Nothing here reads the data, writes a file or knows about epochs beyond the number the
counter-based RNG is keyed with; adaptive rescaling's state (rescale.py) is the
Trainer's (it is checkpointed), handed in with each batch.
"""

from __future__ import annotations

import time

import numpy as np

from ..memory import Arena, BudgetError, Schedule, StepRss, fix_malloc_threshold, pool, rss_bytes, source_from_config
from ..numerics import QTensor
from .executor import StepContext, StepStats


class Step:
    """The step of one run: `train()` runs one batch forward, backward and through the update."""

    def __init__(self, run, model, frozen, algorithm, device, planner, lowered=None):
        self.run, self.model, self.frozen = run, model, frozen
        self.recipe, self.algorithm, self.device = run.recipe, algorithm, device
        # `planner`: the plan builder of the backend choice (plan.Planner), which the command
        # line made from --backend or the run's `backend:` (train/step.py for the Python API);
        # `lowered`: the training graph train/assembly.py lowered already (Parts.graph)
        self.planner = planner
        self.plans = planner.plans_for(model, run.recipe, frozen, lowered)
        # The memory-budget layer: a budget source read between steps, and the arena of
        # the plan in use (weights and optimizer state live in it as views).
        self.budget = source_from_config(run.memory, run.source or "memory")
        self.use_arena = run.memory.arena if run.memory.arena is not None else self.budget is not None
        if self.budget is not None or self.use_arena:
            # Under a budget, memory a step frees goes back to the system (memory/arena.py:
            # glibc's mmap threshold pinned), so the plan's peak bounds the process and each
            # step's RSS growth measures that step. Not otherwise: every large block a step
            # allocates is then a fresh mmap whose pages fault in again, measured at 25-40 %
            # of LeNet-5's CPU step time (FP32 9.5 vs 14.0 ms, NITI 4.9 vs 7.1 ms, one thread).
            fix_malloc_threshold()
        self.arena, self._arena_memory, self._planned_peak = None, None, 0
        self.held_scratch: dict[str, int] = {}  # backend scratch buffers the plans so far grew

    @property
    def backends(self) -> dict:
        return self.planner.backends

    @backends.setter
    def backends(self, value: dict) -> None:
        self.planner.backends = value

    @property
    def executor(self):
        return self.planner.executor

    def close(self) -> None:
        self.planner.close()

    def backend_names(self) -> list[str]:
        """The backends of the choice, in priority order."""
        return list(self.planner.backends)

    # ------------------------------------------------------------ memory plans
    def memory_option(self, plan, step: int):
        """(the memory.fit.Option for step number `step`, the budget it was chosen under);
        (None, None) without the arena. The budget is read here, between steps; a changed
        budget picks another option from the plan's fitter (cached), so nothing is planned twice."""
        if not self.use_arena:
            return None, None
        limit = self.budget.at(step, self._planned_peak) if self.budget is not None else None
        memory = self.run.memory
        return plan.fitter(memory.micro_batch, memory.recompute).choose(limit), limit

    def _arena_for(self, option, state: dict) -> tuple[Arena, dict]:
        """(the arena of `option`'s memory plan, the weights and state). On a change they are
        copied out of the old arena first, so the old buffer is freed before the new one fills."""
        if option.memory is not self._arena_memory:
            if self.arena is not None:
                state = {
                    k: QTensor(v.q.copy(), v.e) if isinstance(v, QTensor) else np.array(v) for k, v in state.items()
                }
            self.arena = None
            self.arena = Arena(option.memory.arena_bytes)
            self._arena_memory = option.memory
        return self.arena, state

    def check_budget(self, batch: int) -> None:
        """Fail before training when a fixed or scheduled budget fits no plan at `batch`."""
        if not self.use_arena or self.budget is None:
            return
        points = [v for _, v in self.budget.points] if isinstance(self.budget, Schedule) else [self.budget.at(0)]
        plan = self.plans.get(batch, True)
        memory = self.run.memory
        for limit in points:
            try:
                plan.fitter(memory.micro_batch, memory.recompute).choose(limit)
            except BudgetError as exc:
                if not self.run.source:
                    raise
                raise BudgetError(f"{self.run.source}: memory.budget: {exc}") from None

    def release_scratch(self) -> None:
        """Give back the kernels' scratch (an evaluation batch grew it outside the memory plan)."""
        self.planner.release_scratch()
        self.held_scratch = {}

    def after_evaluation(self) -> None:
        """Under a budget, the scratch an evaluation batch grew outside the memory plan goes
        back, so training resumes within its budget."""
        if self.budget is not None:
            self.release_scratch()

    # ------------------------------------------------------------ the step
    def train(
        self,
        state: dict,
        images,
        labels: np.ndarray,
        step: int,
        epoch: int,
        seed: int,
        energy_meter,
        rescale,
        lr_scale: float = 1.0,
    ):
        """One training step on a checked batch (uint8 NHWC images, int64 labels) at
        position (`step`, `epoch`), metered by `energy_meter`, with adaptive rescaling's
        `rescale` (rescale.RescaleController, updated), the learning rate times `lr_scale`
        (train/schedule.py): (the updated weights and state, its StepStats)."""
        batch = len(labels)
        plan = self.plans.get(batch, True)
        given = rescale.shifts_for(step, plan.graph)
        ctx = StepContext(self.recipe, plan.graph, seed, step, epoch, batch, shifts=given, lr_scale=lr_scale)
        stats = StepStats(step, epoch, batch)
        stats.given_shifts = len(given or ())
        option, stats.budget_bytes = self.memory_option(plan, step)
        if option is not None:
            stats.micro_batch, stats.memory_plan = option.micro_batch, option.label
            stats.planned_peak_bytes, stats.arena_bytes = option.peak, option.memory.arena_bytes
            self._planned_peak = option.peak
            # a plan that keeps a buffer smaller than an earlier one grew: free it first
            self.held_scratch = self.planner.adopt_scratch(self.held_scratch, option)
        arena = None
        if option is not None:
            arena, state = self._arena_for(option, state)
        env = dict(state)
        # under a memory plan the large arrays the step makes (the prepared input, the ops'
        # results and temporaries) come from kept memory, the array pool (memory/pool.py)
        with pool.serving(option.workspace if option is not None else 0):
            env["input"] = self.algorithm.prepare_input(images, self.run.data.normalize)
            env["labels"] = np.asarray(labels, np.int64)
            self.planner.start_accelerator_clock()  # what ran before this step (an evaluation) is not its cost
            rss = StepRss()
            rss.begin()
            energy_meter.start()
            started = time.perf_counter()
            # a tensor goes when its last op has run: the step holds its live tensors, not all
            self.planner.run(plan, env, ctx, stats=stats, memory=option, arena=arena, release=True)
            stats.time_s = time.perf_counter() - started
        # the meter brackets the step's work alone: reading /proc after it can wait
        # milliseconds on the address-space lock under load, which is not the step's energy
        reading = energy_meter.stop(stats)
        stats.energy_j, stats.energy_meter = reading.joules, reading.meter
        stats.dsp_model_s = self.planner.accelerator_seconds()
        stats.rss_growth_bytes, stats.step_peak_rss_bytes, stats.peak_rss_bytes = rss.end()
        rescale.observe(step, plan.graph, stats.shifts, given)
        state = {name: env[name] for name in state}
        logits = self.algorithm.logits_to_float(env[plan.graph.logits])
        stats.loss = cross_entropy(logits, labels)
        stats.correct = int((logits.argmax(axis=1) == labels).sum())
        stats.rss_bytes = rss.after if rss.after is not None else rss_bytes()
        return state, stats

    def forward_statistics(self, state: dict, images, step: int, epoch: int, seed: int) -> dict:
        """The training graph's forward ops on `images` (batch norm in training mode): `state`
        with the running statistics they update, nothing else changed (no loss, no update)."""
        _, env = self._forward(True, state, images, step, epoch, seed)
        return {name: env[name] for name in state}

    def predict(self, state: dict, images, step: int, epoch: int, seed: int) -> np.ndarray:
        """Float class scores (N, classes) of checked `images` under weights `state`."""
        plan, env = self._forward(False, state, images, step, epoch, seed)
        return self.algorithm.logits_to_float(env[plan.graph.logits])

    def _forward(self, training: bool, state: dict, images, step: int, epoch: int, seed: int):
        """(the plan, its env) after the forward ops of the training (`training`) or evaluation
        graph at len(images) ran on `images` under `state`."""
        plan = self.plans.get(len(images), training)
        ctx = StepContext(self.recipe, plan.graph, seed, step, epoch, len(images))
        env = dict(state)
        env["input"] = self.algorithm.prepare_input(images, self.run.data.normalize)
        self.planner.run(plan, env, ctx, ops=plan.graph.eval_ops, release=True)
        return plan, env


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy of float logits (for printing; never fed back)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_sum - shifted[np.arange(len(labels)), labels]))
