"""Running a plan: the Executor and its runners, one file each.

- executor.py: `Executor` (dispatches a step to a runner; `call` runs one op on its
  backend with fallback), `StepContext`, `StepStats`;
- split.py: the serial runner, each op whole or in row chunks (batch splitting);
- pipeline.py: the co-scheduled runner (micro-batches across the DSP and the CPU);
- planned.py: the memory-planned runner (arena slots, micro-batch slices, recompute);
- bound.py: the serial runner's ops bound once per plan, and `call_op` (an op function on
  its backend; a hook the backend lacks is a NoSupport);
- slices.py: row slicing, shared by the three;
- step.py: `Step`, one training step on the plans of the Planner it is given (memory
  budget, arena, measurements), held and called by the Trainer.

Every runner is `run_*(executor, plan, env, ctx, stats, ...)` and updates `env` in place.
"""

from .executor import Executor, StepContext, StepStats
from .step import Step, cross_entropy

__all__ = ["Executor", "StepContext", "StepStats", "Step", "cross_entropy"]
