"""YAML to frozen dataclasses: precision recipes and runnable experiments.

Every key is checked against the dataclass it fills. An unknown key, a wrong type or
a value out of range raises ConfigError naming the file, the dotted key and the
value, before any training starts. Defaults layer: dataclass defaults, then the
recipe file in configs/algorithms/, then a run's `recipe:` overrides.

    schema.py     the recipe and run dataclasses
    devices.py    device profiles (configs/devices/): dataclasses, host L2, load_device
    building.py   YAML -> dataclasses: read_yaml, build, merge, CONFIG_ROOT
    checks.py     what spans fields: check_recipe, check_run, check_model
    loading.py    the public loaders: load_recipe, load_run, run_from_mapping
"""

from ..errors import ConfigError
from .building import CONFIG_ROOT, build, merge, read_yaml
from .checks import SAFE_NAME, check_model, check_recipe, check_run
from .devices import (
    HOST_L2_FALLBACK,
    CpuMemory,
    DeviceProfile,
    DspMemory,
    HookSpeeds,
    device_size,
    host_l2_bytes,
    load_device,
)
from .loading import load_recipe, load_run, recipe_path, run_from_mapping
from .schema import (
    METRICS,
    DataConfig,
    DataSource,
    EarlyStopping,
    Loss,
    LrSchedule,
    MemoryConfig,
    ModelConfig,
    NumberFormat,
    Optimizer,
    Recipe,
    Rescale,
    RunConfig,
    Schedule,
    SchedulerConfig,
    Tensors,
    TrainConfig,
)

__all__ = [
    "CONFIG_ROOT",
    "METRICS",
    "DataSource",
    "EarlyStopping",
    "LrSchedule",
    "HOST_L2_FALLBACK",
    "SAFE_NAME",
    "ConfigError",
    "CpuMemory",
    "DataConfig",
    "DeviceProfile",
    "HookSpeeds",
    "DspMemory",
    "Loss",
    "MemoryConfig",
    "ModelConfig",
    "NumberFormat",
    "Optimizer",
    "Recipe",
    "Rescale",
    "RunConfig",
    "Schedule",
    "SchedulerConfig",
    "Tensors",
    "TrainConfig",
    "build",
    "check_model",
    "check_recipe",
    "check_run",
    "device_size",
    "host_l2_bytes",
    "load_device",
    "load_recipe",
    "load_run",
    "merge",
    "read_yaml",
    "recipe_path",
    "run_from_mapping",
]
