"""The learning rate's factor at each step (`train.lr_schedule`), for every recipe.

    factor(step) = warm-up(step) * decay(step after warm-up)

- warm-up: linear from 1 / warmup_steps at step 0 to 1 at step warmup_steps (Goyal et al.
  2017, "Accurate, Large Minibatch SGD");
- `cosine`: from 1 down to `min_factor` over the run's remaining steps (Loshchilov and
  Hutter 2017, SGDR, without restarts); `step`: times `gamma` every `step_size` steps;
  `exponential`: times `gamma` every step; `constant`: 1.

The float recipes (FP32, Octo, WAGEUBN, AFP, MLS, FP8) multiply optimizer.lr by it (and by
the recipe's per-epoch `schedule.lr_factor`). NITI has no learning rate: its update moves
a weight by at most 2**(mu - 1) steps of its grid, `mu` the bits the gradient is shifted
to, so a factor f becomes mu + round(log2 f), clamped to 1..8: halving the rate is one
bit less (`niti.scheduled_mu`). Its schedule is a staircase of whole bits, and a factor
below 2**-(mu - 1) cannot go lower than mu = 1.
"""

from __future__ import annotations

import math


def lr_factor(schedule, step: int, total_steps: int) -> float:
    """The factor of `schedule` (config.LrSchedule, or None: 1) at `step` of `total_steps`."""
    if schedule is None:
        return 1.0
    warm = schedule.warmup_steps
    factor = (step + 1) / warm if warm and step < warm else 1.0
    after = max(0, step - warm)
    if schedule.kind == "cosine":
        span = max(1, total_steps - warm)
        progress = min(1.0, after / span)
        factor *= schedule.min_factor + (1.0 - schedule.min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    elif schedule.kind == "step":
        factor *= schedule.gamma ** (after // schedule.step_size)
    elif schedule.kind == "exponential":
        factor *= schedule.gamma**after
    return factor
