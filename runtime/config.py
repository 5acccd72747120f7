"""YAML to frozen dataclasses: precision recipes and runnable experiments.

Every key is checked against the dataclass it fills. An unknown key, a wrong type or
a value out of range raises ConfigError naming the file, the dotted key and the
value, before any training starts. Defaults layer: dataclass defaults, then the
recipe file in configs/algorithms/, then a run's `recipe:` overrides.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .backends import ACCELERATOR, CHOICES as BACKEND_CHOICES, backend_class
from .data import Augment, Normalize
from .errors import ConfigError
from .inputs import bounded, field_problem, number_problem

CONFIG_ROOT = Path(__file__).resolve().parent.parent / "configs"


# ---------------------------------------------------------------- recipe schema

@dataclass(frozen=True)
class Rescale:
    """When a tensor's scale (exponent) is recomputed."""

    policy: Literal["dynamic", "fixed", "adaptive"] = "dynamic"  # every step | never | Mandheling
    min_interval: int = bounded(1, 1, 1 << 20)    # adaptive: steps between checks while the scale moves
    max_interval: int = bounded(64, 1, 1 << 20)   # adaptive: longest gap while it holds


@dataclass(frozen=True)
class NumberFormat:
    """How one tensor role is represented."""

    format: Literal["int", "fp", "float32"] = "int"
    bits: int = bounded(8, 1, 32)
    exponent_bits: int = bounded(0, 0, 11)     # fp only (e.g. 5 for FP8 1-5-2)
    scale: Literal["pow2", "float", "none"] = "pow2"
    granularity: Literal["tensor", "channel", "group"] = "tensor"
    group_size: int = bounded(0, 0, 1 << 16)   # granularity: group
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

    mu: tuple[tuple[int, int], ...] = ()            # NITI: bits of the largest weight step
    lr_factor: tuple[tuple[int, float], ...] = ()   # float recipes: multiplies optimizer.lr

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
    module: str                       # runtime/algorithms/<module>.py lowers it
    description: str = ""
    integer: bool = True              # integer-only between input quantization and loss print
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

    name: str | None = None           # default: lenet5
    num_classes: int | None = bounded(None, 2, 100_000)   # default: the model's own (zoo: 10); else a new head
    onnx: str | None = None           # path of an ONNX file to import
    bias: Literal["fold", "drop"] = "fold"   # onnx: fold into a following batch norm (else keep), or drop
    layers: tuple[Any, ...] | None = None    # interchange/layer_spec.py
    input_shape: tuple[int, int, int] | None = None   # layers: [H, W, C]
    factory: str | None = None        # "module:function" returning a dsptrain.nn.Model


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

    dataset: Literal["fashion-mnist", "cifar10", "synthetic"] | None = None   # default: fashion-mnist
    path: str | None = None           # default: the system location of the dataset
    folder: str | None = None
    npz: str | None = None
    x: str = "x"
    y: str = "y"
    npy: tuple[str, str] | None = None
    test: DataSource | None = None
    test_fraction: float | None = bounded(None, 0.0, 0.9, low_open=True)   # stratified; always the same samples
    val_fraction: float | None = bounded(None, 0.0, 0.9, low_open=True)    # stratified, by train.seed
    augment: Augment = field(default_factory=Augment)
    normalize: Normalize | None = None
    cache_dir: str | None = None      # decoded images of a folder (default ~/.cache/dsptrain/images)
    train_limit: int | None = bounded(None, 1, 1 << 40)    # use only the first N training samples
    test_limit: int | None = bounded(None, 1, 1 << 40)
    classes: tuple[int, ...] | None = None   # keep only these labels, renumbered 0.. in this order


@dataclass(frozen=True)
class LrSchedule:
    """A factor on the learning rate at every step (train/schedule.py; NITI: its mu)."""

    kind: Literal["constant", "cosine", "step", "exponential"] = "constant"
    warmup_steps: int = bounded(0, 0, 1 << 40)
    min_factor: float = bounded(0.0, 0.0, 1.0)      # cosine: the factor at the last step
    step_size: int = bounded(1000, 1, 1 << 40)      # step: steps between factors of gamma
    gamma: float = bounded(0.1, 0.0, 1.0, low_open=True)   # step, exponential


METRICS = Literal["val_accuracy", "val_loss", "test_accuracy", "test_loss", "train_accuracy", "train_loss"]


@dataclass(frozen=True)
class EarlyStopping:
    metric: METRICS = "val_loss"
    patience: int = bounded(5, 1, 100_000)          # epochs without improvement
    min_delta: float = bounded(0.0, 0.0, 1e6)       # an improvement is larger than this


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = bounded(10, 1, 100_000)
    # batches are bounded so that no config makes the first step allocate gigabytes
    batch_size: int = bounded(64, 1, 4096, why="larger batches: micro-batching with memory.budget")
    eval_batch_size: int = bounded(1000, 1, 8192)
    seed: int = bounded(0, 0, 2**32 - 1, why="the counter-based RNG takes a 32-bit seed")
    checkpoint_every_steps: int = bounded(0, 0, 1 << 40)   # 0: at the end of each epoch only
    freeze: tuple[str, ...] = ()      # layer names or globs: no weight gradient, no update (fine-tuning)
    lr_schedule: LrSchedule | None = None
    checkpoint_best: METRICS | None = None          # checkpoint_best.npz: the best epoch by this metric
    early_stopping: EarlyStopping | None = None
    # a non-finite loss or weight, or int8 ranges saturated for saturation_steps steps (train/divergence.py)
    on_divergence: Literal["stop", "skip_batch", "halve_lr"] = "stop"
    saturation_steps: int = bounded(20, 1, 1 << 20)


@dataclass(frozen=True)
class MemoryConfig:
    """Training under a memory budget (runtime/memory/budget.py, memory/fit.py)."""

    budget: int | str | dict[int, Any] | None = None  # bytes, "64MB", "available", {step: size}, or None
    margin: int | str = "20%"          # with "available": leave this share (or size) of MemAvailable free
    micro_batch: int | None = bounded(None, 1, 4096)     # force this slice size (None: the planner picks)
    recompute: Literal["auto", "none", "sqrt", "budget", "all"] = "auto"   # which recompute plans to consider
    arena: bool | None = None          # place tensors in one arena (default: when a budget is set)


@dataclass(frozen=True)
class SchedulerConfig:
    """Mandheling's techniques, each a switch."""

    co_schedule: bool = True
    adaptive_rescale: bool = True
    batch_split: bool = True
    device: str = "v66"               # configs/devices/<device>.yaml
    micro_batches: int | Literal["auto"] = bounded("auto", 1, 256)   # co-scheduling's; auto: the profile's cost model (cost.py)
    # profile: ops whose hooks the device profile lists under dsp.bad_at run on the CPU;
    # first: every op on the first backend that supports it (plan.place)
    placement: Literal["profile", "first"] = "profile"


# ---------------------------------------------------------------- device profiles

@dataclass(frozen=True)
class DspMemory:
    vtcm: int | str = "256KiB"       # tightly coupled vector memory
    l2: int | str = "1MiB"           # the DSP's L2 cache
    # speeds the scheduler's cost model reads (cost.py: micro-batch count, batch-split check);
    # the defaults are v66.yaml's (a phone's DSP), host.yaml has the emulator's
    macs_per_s: float = bounded(6.4e10, 1e3, 1e18)   # int8 multiply-accumulates per second in products
    bytes_per_s: float = bounded(1e10, 1e3, 1e15)    # bytes per second to and from DDR
    call_s: float = bounded(1e-4, 0.0, 10.0, low_open=True)   # seconds of overhead per call (a FastRPC round trip)
    # the modeled DSP time (cost.dsp_op_seconds): one packet per cycle per HVX thread
    clock_hz: float = bounded(1.0e9, 0.0, 1e12, low_open=True)   # the DSP core clock
    hvx_threads: int = bounded(4, 1, 8, why="HVX contexts of a Hexagon cDSP")   # the work of one op is split across them
    # hook -> why the DSP is bad at it: ops with such a hook run on the CPU under
    # scheduler.placement: profile (plan.place); keys must be hooks the DSP implements
    bad_at: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuMemory:
    l2: int | str = "host"           # bytes, a size, or "host": this machine's L2 (sysfs)
    macs_per_s: float = bounded(5e10, 1e3, 1e18)
    bytes_per_s: float = bounded(1e10, 1e3, 1e15)
    call_s: float = bounded(2e-5, 0.0, 10.0, low_open=True)   # Python dispatch of one op


@dataclass(frozen=True)
class DeviceProfile:
    """The fast memories batch splitting fits an op's working set into (configs/devices/)."""

    name: str
    description: str = ""
    dsp: DspMemory = field(default_factory=DspMemory)
    cpu: CpuMemory = field(default_factory=CpuMemory)
    source: str = ""

    def size(self, key: str) -> int:
        """Bytes of `dsp.vtcm`, `dsp.l2` or `cpu.l2` (checked when the profile loaded)."""
        part, name = key.split(".")
        return _device_size(getattr(getattr(self, part), name), self.source, key)


HOST_L2_FALLBACK = 1 << 20   # when sysfs has no L2 size (not Linux): 1 MiB, said by `dsptrain info`


def host_l2_bytes() -> int:
    """This machine's L2 per core, from Linux sysfs; HOST_L2_FALLBACK when unreadable."""
    from .memory import parse_size

    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2" and \
                    (index / "type").read_text().strip() in ("Unified", "Data"):
                return parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
    return HOST_L2_FALLBACK


def _device_size(value, source, key) -> int:
    from .memory import size_setting

    if value == "host":
        return host_l2_bytes()
    return size_setting(value, source, key, 4096, "is smaller than 4 KiB: not a cache size")


def load_device(name_or_path: str) -> DeviceProfile:
    """A device profile by name (configs/devices/<name>.yaml) or path; sizes are checked."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIG_ROOT / "devices" / f"{name_or_path}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (CONFIG_ROOT / "devices").glob("*.yaml"))
        raise ConfigError(path, None, f"no such device profile (known: {', '.join(known)})")
    profile = build(DeviceProfile, read_yaml(path), path, given={"source": str(path)})
    for key in ("dsp.vtcm", "dsp.l2", "cpu.l2"):
        profile.size(key)
    for part in ("dsp", "cpu"):
        for name in ("macs_per_s", "bytes_per_s", "call_s") + (("clock_hz",) if part == "dsp" else ()):
            value = getattr(getattr(profile, part), name)
            if not value > 0:
                raise ConfigError(path, f"{part}.{name}", f"{value!r} must be > 0")
    threads = profile.dsp.hvx_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 8:
        raise ConfigError(path, "dsp.hvx_threads", f"{threads!r} must be an integer from 1 to 8 "
                          "(HVX contexts of a Hexagon cDSP)")
    dsp_hooks = backend_class(ACCELERATOR).hooks   # the backend the profile's `dsp` part describes
    for hook, why in profile.dsp.bad_at.items():
        if hook not in dsp_hooks:
            raise ConfigError(path, f"dsp.bad_at.{hook}", f"{hook!r} is not a DSP hook "
                              f"(known: {', '.join(sorted(dsp_hooks))})")
        if not isinstance(why, str) or not why.strip():
            raise ConfigError(path, f"dsp.bad_at.{hook}", f"{why!r}: give the reason as a string")
    return profile


@dataclass(frozen=True)
class RunConfig:
    name: str
    recipe: Recipe
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    backend: Literal[BACKEND_CHOICES] = "auto"     # backends.CHOICES
    energy: str = "auto"
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    out_dir: str | None = None        # default: runs/<name>
    source: str = ""                  # the file it came from


# ---------------------------------------------------------------- building dataclasses from dicts

def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(tp, value, source, key):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, source, key)
            except ConfigError as exc:
                errors.append(exc)
        if len(errors) == 1 and isinstance(value, dict):   # `X | None` given a mapping: X's own complaint
            raise errors[0]
        raise ConfigError(source, key, f"{value!r} is not {' or '.join(_type_name(a) for a in args)}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(source, key, f"{value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(source, key, f"expected a mapping, got {value!r}")
        return build(tp, value, source, key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(source, key, f"expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, source, f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(source, key, f"expected {len(args)} items, got {value!r}")
        return tuple(_convert(a, v, source, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(source, key, f"expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(source, key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(source, key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(source, key, f"expected a number, got {value!r}")
        try:
            value = float(value)
        except OverflowError:   # an integer beyond float range
            raise ConfigError(source, key, f"{value} is not a finite number") from None
        problem = number_problem(value)
        if problem:
            raise ConfigError(source, key, problem)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(source, key, f"expected a string, got {value!r}")
        if "\x00" in value or len(value) > 4096:
            raise ConfigError(source, key, f"{value[:80]!r}: a NUL byte or more than 4096 characters")
        return value
    raise TypeError(f"config.py cannot build {tp}")


def build(cls, data: dict, source, prefix: str = "", given: dict | None = None):
    """Fill dataclass `cls` from `data`; unknown keys and bad values raise ConfigError.

    `given` holds fields already built by the caller; the file may not set them.
    """
    given = given or {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)} - set(given)
    for key in data:
        if key not in names:
            raise ConfigError(source, f"{prefix}.{key}".lstrip("."),
                              f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = dict(given)
    for f in dataclasses.fields(cls):
        if f.name in given:
            continue
        key = f"{prefix}.{f.name}".lstrip(".")
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], source, key)
            problem = field_problem(f, kwargs[f.name])   # the range the field declares
            if problem:
                raise ConfigError(source, key, problem)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(source, key, "is required")
    return cls(**kwargs)


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _FileProblem(Exception):
    pass


def read_yaml(path: Path) -> dict:
    """A YAML mapping from a regular file, read with limits (inputs/yaml_limits.py)."""
    from .inputs import YamlLimits, YamlProblem, load_yaml, read_limited

    limits = YamlLimits()
    try:
        raw = read_limited(path, "YAML", limits.max_bytes, _FileProblem)
    except _FileProblem as exc:
        raise ConfigError(path, None, str(exc).removeprefix(f"{path}: ")) from None
    try:
        data = load_yaml(raw, limits)
    except YamlProblem as exc:
        raise ConfigError(path, None if exc.key is None else str(exc.key), str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, None, f"expected a mapping at the top, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------- public loaders

def recipe_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        return path
    if not _SAFE_NAME.match(name_or_path):   # a name, not a way out of configs/algorithms/
        raise ConfigError("recipe", None, f"{name_or_path!r} is neither a recipe name nor a .yaml path")
    return CONFIG_ROOT / "algorithms" / f"{name_or_path}.yaml"


def _check_recipe(recipe: Recipe, source) -> Recipe:
    for role in ("weights", "activations", "errors", "gradients", "updates"):
        getattr(recipe.tensors, role).check(source, f"tensors.{role}")
    for name in ("mu", "lr_factor"):
        starts = [s for s, _ in getattr(recipe.schedule, name)]
        if starts != sorted(starts) or any(s < 0 for s in starts):
            raise ConfigError(source, f"schedule.{name}", f"epochs {starts} must be >= 0 and ascending")
    for epoch, mu in recipe.schedule.mu:
        if not 1 <= mu <= 8:
            raise ConfigError(source, "schedule.mu", f"mu {mu} at epoch {epoch} is outside 1..8")
    for name in ("mu", "lr_factor"):
        for i, (start, value) in enumerate(getattr(recipe.schedule, name)):
            problem = number_problem(start, 0, 100_000) or (
                number_problem(value, 0.0, 1000.0, low_open=True) if name == "lr_factor" else None)
            if problem:
                raise ConfigError(source, f"schedule.{name}[{i}]", problem)
    for role in ("weights", "activations", "errors", "gradients", "updates"):
        rescale = getattr(recipe.tensors, role).rescale
        if rescale.min_interval > rescale.max_interval:
            raise ConfigError(source, f"tensors.{role}.rescale.min_interval",
                              f"{rescale.min_interval} is above max_interval {rescale.max_interval}")
    from .algorithms import algorithm_module  # late: the algorithms import config

    module = algorithm_module(recipe.module, source)
    for key, value in recipe.params.items():   # every number finite and of sane size, whatever the module
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = number_problem(value, -(2**31), 2**31)
            if problem:
                raise ConfigError(source, f"params.{key}", problem)
    if hasattr(module, "check_recipe"):   # recipe-specific `params`, checked by their module
        module.check_recipe(recipe, source)
    elif recipe.params:
        key = sorted(recipe.params, key=str)[0]
        raise ConfigError(source, f"params.{key}", f"unknown for recipe {recipe.name!r} "
                          f"(module {recipe.module!r} takes no params)")
    return recipe


def load_recipe(name_or_path: str, overrides: dict | None = None) -> Recipe:
    """A recipe by name (configs/algorithms/<name>.yaml) or path, with optional overrides."""
    path = recipe_path(name_or_path)
    if not path.exists():
        known = sorted(p.stem for p in (CONFIG_ROOT / "algorithms").glob("*.yaml"))
        raise ConfigError(path, None, f"no such recipe (known: {', '.join(known)})")
    data = _merge(read_yaml(path), overrides or {})
    return _check_recipe(build(Recipe, data, path), path)


def load_run(path: str | Path, **overrides) -> RunConfig:
    """A run config (configs/runs/*.yaml). Keyword overrides replace top-level sections."""
    path = Path(path)
    return run_from_mapping(read_yaml(path), path, **overrides)


def run_from_mapping(data: dict, path: Path, **overrides) -> RunConfig:
    """A run config from a mapping already read from `path` (a federated config takes
    its own `fl:` section out first, runtime/fl/settings.py)."""
    path = Path(path)
    data = dict(data)
    if "fl" in data:
        raise ConfigError(path, "fl", "this is a federated run config: run it with `dsptrain fl simulate` or `deploy`")
    recipe_spec = data.pop("recipe", None)
    if recipe_spec is None:
        raise ConfigError(path, "recipe", "is required (a name in configs/algorithms/ or a mapping with 'name')")
    for name in ([recipe_spec] if isinstance(recipe_spec, str) else
                 [recipe_spec.get("name")] if isinstance(recipe_spec, dict) else []):
        if isinstance(name, str) and Path(name).suffix not in (".yaml", ".yml") and not _SAFE_NAME.match(name):
            raise ConfigError(path, "recipe" if isinstance(recipe_spec, str) else "recipe.name",
                              f"{name!r} is neither a recipe name nor a .yaml path")
    if isinstance(recipe_spec, str):
        if not recipe_path(recipe_spec).exists():   # name the run file's key, and the closest recipe
            import difflib

            known = sorted(p.stem for p in (CONFIG_ROOT / "algorithms").glob("*.yaml"))
            close = difflib.get_close_matches(recipe_spec, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(path, "recipe", f"{recipe_spec!r}: no such recipe in {CONFIG_ROOT / 'algorithms'} "
                              f"(known: {', '.join(known)}){hint}")
        try:
            recipe = load_recipe(recipe_spec)
        except ConfigError as exc:   # the recipe file cannot be read at all: point at the run file too
            if exc.key is not None:
                raise
            raise ConfigError(path, "recipe", f"{recipe_spec!r}: {exc}") from None
    elif isinstance(recipe_spec, dict) and isinstance(recipe_spec.get("name"), str):
        spec = dict(recipe_spec)
        name = spec.pop("name")
        try:
            recipe = load_recipe(name, spec)
        except ConfigError as exc:  # an override went wrong: point at the run file
            if exc.key is None:
                raise ConfigError(path, "recipe.name", f"{name!r}: {exc}") from None
            if exc.source != str(recipe_path(name)):
                raise
            raise ConfigError(path, f"recipe.{exc.key}", f"{exc.detail} (overriding {name})") from None
    else:
        raise ConfigError(path, "recipe", f"{recipe_spec!r} is neither a recipe name nor a mapping with 'name'")
    if isinstance(data.get("model"), str):   # `model: lenet5`, as `recipe: niti` names a recipe
        data["model"] = {"name": data["model"]}
    data.setdefault("name", path.stem)
    run = build(RunConfig, data, path, given={"recipe": recipe, "source": str(path)})
    run = dataclasses.replace(run, **overrides) if overrides else run
    _check_run(run, path)
    return run


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def _check_run(run: RunConfig, source) -> None:
    if not _SAFE_NAME.match(run.name):
        raise ConfigError(source, "name", f"{run.name!r}: a run name is letters, digits and . _ + - "
                          "(it names the output directory runs/<name>)")
    if run.out_dir is not None:
        from .inputs import check_regular

        if not run.out_dir.strip() or "\x00" in run.out_dir:
            raise ConfigError(source, "out_dir", f"{run.out_dir!r} is not a directory path")
        problem = check_regular(run.out_dir, "output")
        if problem is None:
            problem = "is a file"
        if problem != "does not exist" and not Path(run.out_dir).is_dir():
            raise ConfigError(source, "out_dir", f"{run.out_dir!r} {problem.split(':')[0]}: expected a directory")
    t = run.train
    for key, value, low in (("train.epochs", t.epochs, 1), ("train.batch_size", t.batch_size, 1),
                            ("train.eval_batch_size", t.eval_batch_size, 1),
                            ("train.checkpoint_every_steps", t.checkpoint_every_steps, 0)):
        if value < low:
            raise ConfigError(source, key, f"{value} must be >= {low}")
    classes = run.data.classes
    if classes is not None and (not classes or len(set(classes)) != len(classes) or min(classes) < 0):
        raise ConfigError(source, "data.classes", f"{list(classes)} must be distinct labels >= 0")
    _check_data(run.data, source)
    if run.data.dataset == "cifar10" and not run.data.path:
        raise ConfigError(source, "data.path", "dataset cifar10 needs a directory with data_batch_1.bin .. "
                          "data_batch_5.bin and test_batch.bin (CIFAR-10's binary version)")
    for key, value in (("data.train_limit", run.data.train_limit), ("data.test_limit", run.data.test_limit)):
        if value is not None and value < 1:
            raise ConfigError(source, key, f"{value} must be >= 1")
    from .memory import source_from_config  # late: the memory layer is not needed to read YAML

    source_from_config(run.memory, source)
    try:
        load_device(run.scheduler.device)
    except ConfigError as exc:
        raise ConfigError(source, "scheduler.device", f"{run.scheduler.device!r}: {exc}") from None
    if run.scheduler.micro_batches != "auto" and run.scheduler.micro_batches < 1:
        raise ConfigError(source, "scheduler.micro_batches", f"{run.scheduler.micro_batches} must be >= 1 or auto")
    from .energy import spec_problem  # late: energy imports errors only

    if spec_problem(run.energy):
        raise ConfigError(source, "energy", spec_problem(run.energy))
    _check_model(run, source)


def _check_data(data: DataConfig, source) -> None:
    """One source at a time, and the keys that go with it."""
    def own(section):
        return [key for key in ("folder", "npz", "npy") if getattr(section, key)]

    mine = own(data)
    if len(mine) > 1:
        raise ConfigError(source, f"data.{mine[1]}", f"give one of data.folder, data.npz, data.npy (also {mine[0]})")
    if mine and (data.dataset or data.path):
        key = "data.dataset" if data.dataset else "data.path"
        raise ConfigError(source, key, f"is for a stored dataset; data.{mine[0]} names your own data")
    if data.test is not None:
        if not mine:
            raise ConfigError(source, "data.test", "a test source goes with data.folder, data.npz or data.npy")
        if len(own(data.test)) != 1:
            raise ConfigError(source, "data.test", "give one of folder, npz, npy")
        if data.test_fraction:
            raise ConfigError(source, "data.test_fraction", "the test data is data.test; give one of the two")
    if data.test_fraction and not mine:
        raise ConfigError(source, "data.test_fraction", f"{data.dataset or 'fashion-mnist'} has its own test "
                          "split; test_fraction splits your own data (data.folder, npz, npy)")
    if (data.test_fraction or 0) + (data.val_fraction or 0) >= 1:
        raise ConfigError(source, "data.val_fraction", f"{data.val_fraction} with test_fraction "
                          f"{data.test_fraction} leaves nothing to train on")
    problem = data.augment.problem()
    if problem:
        raise ConfigError(source, f"data.augment.{problem[0]}", problem[1])
    if data.normalize is not None:
        problem = data.normalize.problem()
        if problem:
            raise ConfigError(source, f"data.normalize.{problem[0]}", problem[1])


def _check_model(run: RunConfig, source) -> None:
    """The model section builds a model and train.freeze names its layers (else ConfigError).
    A model file (model.onnx) is read when the Trainer starts, before any data loads: a run
    config may name a file an earlier step of a workflow writes."""
    from .interchange import check_section, frozen_layers, resolve_model as resolve  # late: it reads model files

    if run.model.num_classes is not None and run.model.num_classes < 1:
        raise ConfigError(source, "model.num_classes", f"{run.model.num_classes} must be >= 1")
    check_section(run.model, source)
    if run.model.onnx is None:
        model, _ = resolve(run.model, source)
        frozen_layers(model, run.train.freeze, source)
