"""dsptrain: integer training on phones, with Hexagon DSP offload.

run = dsptrain.load_run("configs/runs/lenet-fmnist-niti.yaml")
trainer = dsptrain.Trainer(run)
trainer.fit()
"""

__version__ = "0.1.0"

from . import checkpoint, models  # noqa: E402
from .config import Recipe, RunConfig, load_recipe, load_run  # noqa: E402
from .errors import BackendError, ConfigError, DataError, DsptrainError, LoweringError, UserError  # noqa: E402
from .execute import StepStats  # noqa: E402
from .interchange import export, from_torch, load_model  # noqa: E402
from .numerics import QTensor  # noqa: E402
from .train import Trainer  # noqa: E402

__all__ = [
    "__version__",
    "checkpoint",
    "models",
    "load_run",
    "load_recipe",
    "RunConfig",
    "Recipe",
    "Trainer",
    "StepStats",
    "QTensor",
    "load_model",
    "from_torch",
    "export",
    "DsptrainError",
    "UserError",
    "ConfigError",
    "DataError",
    "LoweringError",
    "BackendError",
]
