"""The schema of precision recipes and runnable experiments: frozen dataclasses whose
fields, types and declared ranges (inputs.bounded) are what a YAML file may say
(config/building.py fills them, config/checks.py checks what spans fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..backends import CHOICES as BACKEND_CHOICES
from ..data import Augment, Normalize
from ..errors import ConfigError
from ..inputs import bounded

# ---------------------------------------------------------------- recipe schema


@dataclass(frozen=True)
class Rescale:
    """When a tensor's scale (exponent) is recomputed."""

    policy: Literal["dynamic", "fixed", "adaptive"] = "dynamic"  # every step | never | Mandheling
    min_interval: int = bounded(1, 1, 1 << 20)  # adaptive: steps between checks while the scale moves
    max_interval: int = bounded(64, 1, 1 << 20)  # adaptive: longest gap while it holds


@dataclass(frozen=True)
class NumberFormat:
    """How one tensor role is represented."""

    format: Literal["int", "fp", "float32"] = "int"
    bits: int = bounded(8, 1, 32)
    exponent_bits: int = bounded(0, 0, 11)  # fp only (e.g. 5 for FP8 1-5-2)
    scale: Literal["pow2", "float", "none"] = "pow2"
    granularity: Literal["tensor", "channel", "group"] = "tensor"
    group_size: int = bounded(0, 0, 1 << 16)  # granularity: group
    rounding: Literal["round", "psto", "sto", "nearest_even", "none"] = "round"
    rescale: Rescale = field(default_factory=Rescale)

    def check(self, source, key):
        if not 1 <= self.bits <= 32:
            raise ConfigError(source, f"{key}.bits", f"{self.bits} is outside 1..32")
        if self.granularity == "group" and self.group_size < 1:
            raise ConfigError(source, f"{key}.group_size", "granularity 'group' needs group_size >= 1")
        if self.format == "fp" and not 1 <= self.exponent_bits < self.bits:
            raise ConfigError(source, f"{key}.exponent_bits", f"{self.exponent_bits} does not fit {self.bits} bits")


@dataclass(frozen=True)
class Tensors:
    """Number formats by tensor role."""

    weights: NumberFormat = field(default_factory=NumberFormat)
    activations: NumberFormat = field(default_factory=NumberFormat)
    errors: NumberFormat = field(default_factory=NumberFormat)
    gradients: NumberFormat = field(default_factory=NumberFormat)
    updates: NumberFormat = field(default_factory=NumberFormat)


@dataclass(frozen=True)
class Loss:
    kind: Literal["niti_int_ce", "softmax_ce"] = "softmax_ce"


@dataclass(frozen=True)
class Optimizer:
    kind: Literal["niti_sgd", "sgd"] = "sgd"
    lr: float = bounded(0.05, 0.0, 10.0, low_open=True)
    momentum: float = bounded(0.0, 0.0, 0.999)
    weight_decay: float = bounded(0.0, 0.0, 1.0)
    nesterov: bool = False


@dataclass(frozen=True)
class Schedule:
    """Values that change with the epoch: [[from_epoch, value], ...], sorted."""

    mu: tuple[tuple[int, int], ...] = ()  # NITI: bits of the largest weight step
    lr_factor: tuple[tuple[int, float], ...] = ()  # float recipes: multiplies optimizer.lr

    def at(self, name: str, epoch: int, default):
        value = default
        for start, v in getattr(self, name):
            if epoch >= start:
                value = v
        return value


@dataclass(frozen=True)
class Recipe:
    """A training algorithm: what each tensor is, the loss, the update, the schedule."""

    name: str
    module: str  # runtime/algorithms/<module>.py lowers it
    description: str = ""
    integer: bool = True  # integer-only between input quantization and loss print
    tensors: Tensors = field(default_factory=Tensors)
    loss: Loss = field(default_factory=Loss)
    optimizer: Optimizer = field(default_factory=Optimizer)
    schedule: Schedule = field(default_factory=Schedule)
    params: dict[str, Any] = field(default_factory=dict)  # recipe-specific, checked by its module


# ---------------------------------------------------------------- run schema


@dataclass(frozen=True)
class ModelConfig:
    """One of: a zoo `name`, an `onnx` file, a `layers` list, a `factory` 'module:function'
    (interchange/model_source.py); `name` also labels the others."""

    name: str | None = None  # default: lenet5
    num_classes: int | None = bounded(None, 2, 100_000)  # default: the model's own (zoo: 10); else a new head
    onnx: str | None = None  # path of an ONNX file to import
    bias: Literal["fold", "drop"] = "fold"  # onnx: fold into a following batch norm (else keep), or drop
    layers: tuple[Any, ...] | None = None  # interchange/layer_spec.py
    input_shape: tuple[int, int, int] | None = None  # layers: [H, W, C]
    factory: str | None = None  # "module:function" returning a dsptrain.nn.Model


@dataclass(frozen=True)
class DataSource:
    """A user's own data (data/sources.py): one of an image `folder` (one subfolder per
    class), an `npz` file with images under key `x` and labels under `y`, or `npy`:
    [images.npy, labels.npy]."""

    folder: str | None = None
    npz: str | None = None
    x: str = "x"
    y: str = "y"
    npy: tuple[str, str] | None = None


@dataclass(frozen=True)
class DataConfig:
    """A stored `dataset`, or the user's own data (the DataSource keys; `test:` a source of
    its own, else `test_fraction` of it held out); splits, augmentation, normalisation."""

    dataset: Literal["fashion-mnist", "cifar10", "synthetic"] | None = None  # default: fashion-mnist
    path: str | None = None  # default: the system location of the dataset
    folder: str | None = None
    npz: str | None = None
    x: str = "x"
    y: str = "y"
    npy: tuple[str, str] | None = None
    test: DataSource | None = None
    test_fraction: float | None = bounded(None, 0.0, 0.9, low_open=True)  # stratified; always the same samples
    val_fraction: float | None = bounded(None, 0.0, 0.9, low_open=True)  # stratified, by train.seed
    augment: Augment = field(default_factory=Augment)
    normalize: Normalize | None = None
    cache_dir: str | None = None  # decoded images of a folder (default ~/.cache/dsptrain/images)
    train_limit: int | None = bounded(None, 1, 1 << 40)  # use only the first N training samples
    test_limit: int | None = bounded(None, 1, 1 << 40)
    classes: tuple[int, ...] | None = None  # keep only these labels, renumbered 0.. in this order


@dataclass(frozen=True)
class LrSchedule:
    """A factor on the learning rate at every step (train/schedule.py; NITI: its mu)."""

    kind: Literal["constant", "cosine", "step", "exponential"] = "constant"
    warmup_steps: int = bounded(0, 0, 1 << 40)
    min_factor: float = bounded(0.0, 0.0, 1.0)  # cosine: the factor at the last step
    step_size: int = bounded(1000, 1, 1 << 40)  # step: steps between factors of gamma
    gamma: float = bounded(0.1, 0.0, 1.0, low_open=True)  # step, exponential


METRICS = Literal["val_accuracy", "val_loss", "test_accuracy", "test_loss", "train_accuracy", "train_loss"]


@dataclass(frozen=True)
class EarlyStopping:
    metric: METRICS = "val_loss"
    patience: int = bounded(5, 1, 100_000)  # epochs without improvement
    min_delta: float = bounded(0.0, 0.0, 1e6)  # an improvement is larger than this


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = bounded(10, 1, 100_000)
    # batches are bounded so that no config makes the first step allocate gigabytes
    batch_size: int = bounded(64, 1, 4096, why="larger batches: micro-batching with memory.budget")
    eval_batch_size: int = bounded(1000, 1, 8192)
    seed: int = bounded(0, 0, 2**32 - 1, why="the counter-based RNG takes a 32-bit seed")
    checkpoint_every_steps: int = bounded(0, 0, 1 << 40)  # 0: at the end of each epoch only
    freeze: tuple[str, ...] = ()  # layer names or globs: no weight gradient, no update (fine-tuning)
    lr_schedule: LrSchedule | None = None
    checkpoint_best: METRICS | None = None  # checkpoint_best.npz: the best epoch by this metric
    early_stopping: EarlyStopping | None = None
    # a non-finite loss or weight, or int8 ranges saturated for saturation_steps steps (train/divergence.py)
    on_divergence: Literal["stop", "skip_batch", "halve_lr"] = "stop"
    saturation_steps: int = bounded(20, 1, 1 << 20)
    # before each epoch's evaluation, this many training batches run forward in training mode
    # so the batch norms' running statistics follow the weights as they now are (train/recalibrate.py)
    bn_recalibration: int = bounded(0, 0, 100_000)


@dataclass(frozen=True)
class MemoryConfig:
    """Training under a memory budget (runtime/memory/budget.py, memory/fit.py)."""

    budget: int | str | dict[int, Any] | None = None  # bytes, "64MB", "available", {step: size}, or None
    margin: int | str = "20%"  # with "available": leave this share (or size) of MemAvailable free
    micro_batch: int | None = bounded(None, 1, 4096)  # force this slice size (None: the planner picks)
    recompute: Literal["auto", "none", "sqrt", "budget", "all"] = "auto"  # which recompute plans to consider
    arena: bool | None = None  # place tensors in one arena (default: when a budget is set)


@dataclass(frozen=True)
class SchedulerConfig:
    """Mandheling's techniques, each a switch."""

    co_schedule: bool = True
    adaptive_rescale: bool = True
    batch_split: bool = True
    device: str = "v66"  # configs/devices/<device>.yaml
    micro_batches: int | Literal["auto"] = bounded(
        "auto", 1, 256
    )  # co-scheduling's; auto: the profile's cost model (cost.py)
    # profile: ops whose hooks the device profile lists under dsp.bad_at run on the CPU;
    # first: every op on the first backend that supports it (plan.place)
    placement: Literal["profile", "first"] = "profile"


@dataclass(frozen=True)
class RunConfig:
    name: str
    recipe: Recipe
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    backend: Literal[BACKEND_CHOICES] = "auto"  # backends.CHOICES
    energy: str = "auto"
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    out_dir: str | None = None  # default: runs/<name>
    source: str = ""  # the file it came from
