"""Noticing that training diverged, and what to do then (`train.on_divergence`).

After every step: a non-finite loss, or a non-finite value in a float weight or optimizer
state, has diverged at once; an int8 weight tensor (NITI) with more than
SATURATED_SHARE of its values at the int8 limits is saturated, and saturation in some
tensor for `train.saturation_steps` steps in a row has diverged (an integer recipe's
loss stays finite however wrong its ranges go). Then:

- `stop` (default): DivergedError naming the step, what diverged and the checkpoint that
  holds the last good weights (a diverged step is never checkpointed); exit status 3;
- `skip_batch`: the step's update is undone and the run goes on with the next batch;
- `halve_lr`: undone, and the learning rate halved from then on (NITI: mu one bit less).
MAX_RETRIES such events in a row stop the run as `stop` would.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import DivergedError
from ..numerics import QTensor

SATURATED_SHARE = 0.5  # of a tensor's int8 values at -128 or 127: a trained layer holds a few there
MAX_RETRIES = 10


class Watch:
    """One run's divergence watch; its state (`lr_scale`, the saturation count) is checkpointed."""

    def __init__(self, policy: str = "stop", saturation_steps: int = 20):
        self.policy, self.saturation_steps = policy, saturation_steps
        self.saturated_for = 0  # steps in a row with a saturated int8 tensor
        self.halvings = 0  # halve_lr: how often the rate was halved
        self.in_a_row = 0  # skip_batch / halve_lr events without a good step between

    @property
    def lr_scale(self) -> float:
        return 0.5**self.halvings

    def keep(self, state: dict) -> dict | None:
        """A copy of `state` to go back to, when the policy may undo a step (else None: nothing copied)."""
        if self.policy == "stop":
            return None
        return {name: QTensor(v.q.copy(), v.e) if isinstance(v, QTensor) else np.array(v) for name, v in state.items()}

    def problem(self, loss: float, state: dict) -> str | None:
        """What diverged in this step, or None."""
        if not math.isfinite(loss):
            return f"the loss is {loss}"
        saturated = None
        for name, value in state.items():
            if isinstance(value, QTensor):
                if value.q.dtype == np.int8 and value.q.size and saturated is None:
                    share = np.count_nonzero((value.q == 127) | (value.q == -128)) / value.q.size
                    if share > SATURATED_SHARE:
                        saturated = f"{name} has {share:.0%} of its int8 values at the limits"
            elif np.issubdtype(np.asarray(value).dtype, np.floating) and not np.isfinite(value).all():
                bad = int(np.count_nonzero(~np.isfinite(value)))
                return f"{name} holds {bad} non-finite value{'s' if bad > 1 else ''}"
        self.saturated_for = self.saturated_for + 1 if saturated else 0
        if self.saturated_for >= self.saturation_steps:
            return f"{saturated} for {self.saturated_for} steps (train.saturation_steps {self.saturation_steps})"
        return None

    def act(self, problem: str, where: str, last_good: str) -> str:
        """The policy's answer to `problem` ("skip" or "halve"); DivergedError under `stop`
        or after MAX_RETRIES events in a row."""
        self.in_a_row += 1
        if self.policy == "stop" or self.in_a_row > MAX_RETRIES:
            why = "" if self.policy == "stop" else f" ({MAX_RETRIES} times in a row under on_divergence {self.policy})"
            raise DivergedError(
                f"{where}: training diverged: {problem}{why}; {last_good}. Lower optimizer.lr, "
                f"warm up (train.lr_schedule.warmup_steps), or set train.on_divergence: "
                f"skip_batch | halve_lr"
            )
        self.saturated_for = 0
        if self.policy == "halve_lr":
            self.halvings += 1
            return "halve"
        return "skip"

    def good_step(self) -> None:
        self.in_a_row = 0

    def state(self) -> list[int]:
        return [self.saturated_for, self.halvings, self.in_a_row]

    def restore(self, values) -> None:
        self.saturated_for, self.halvings, self.in_a_row = (int(v) for v in values)
