"""Training a run, in three rooms:

- assembly.py: a run config's parts (the recipe's algorithm, the model, the device
  profile, the energy meter, the data splits);
- step.py: the execute.Step a Trainer makes for itself (on a Planner of the run's
  backend) when it is not handed one;
- loop.py: the Trainer, the loop around the step (epochs, evaluation, metrics);
  checkpoints.py: what it saves and how it continues from a checkpoint.
"""

from ..memory import peak_rss_bytes as _peak_rss_bytes  # noqa: F401 (benches read them here)
from ..memory import rss_bytes as _rss_bytes  # noqa: F401
from ..metrics import step_record as _step_record  # noqa: F401 (tests read it here)
from .assembly import lowerable_models
from .loop import Trainer
from .step import Step, cross_entropy

__all__ = ["Trainer", "Step", "cross_entropy", "lowerable_models"]
