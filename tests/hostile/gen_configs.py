"""A seeded generator of broken run configs and recipes, by class of fault.

Numeric faults come from the schema itself: every int and float field of the config
dataclasses, with the range it declares (inputs/numbers.py), gets values below, above,
not finite, of the wrong type. The other classes: unknown keys, bad choices, wrong
section types, recipe modules outside the package, bad schedules and params, YAML that
is malformed, repeats keys, expands, nests or is not UTF-8, and paths that are not
regular files. Each case names the pieces its error line must hold.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import random
import typing
from pathlib import Path

import yaml
from dsptrain import config as C
from dsptrain.inputs.numbers import field_range

from .harness import Case

BASE = {
    "name": "hostile",
    "recipe": "niti",
    "model": {"name": "lenet5", "num_classes": 10},
    "data": {"dataset": "synthetic", "train_limit": 64, "test_limit": 32},
    "train": {"epochs": 1, "batch_size": 32, "eval_batch_size": 32, "seed": 1},
    "backend": "auto",
    "energy": "estimate",
}
RUN_SECTIONS = {
    "model": C.ModelConfig,
    "data": C.DataConfig,
    "train": C.TrainConfig,
    "memory": C.MemoryConfig,
    "scheduler": C.SchedulerConfig,
}
RECIPE_SECTIONS = {"tensors": C.Tensors, "optimizer": C.Optimizer, "loss": C.Loss}
# recipes whose module honours every override of a numeric key (NITI and FP32 fix formats)
OVERRIDE_RECIPE = "octo"


def numeric_fields(cls, prefix=""):
    """(dotted key, field, is_int) for every number in dataclass `cls`, nested ones too."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            yield from numeric_fields(tp, key + ".")
            continue
        args = typing.get_args(tp) or (tp,)
        if str in args:  # sizes ("64MB" or bytes) are checked by memory.budget.size_setting
            continue
        if int in args or float in args:
            yield key, f, int in args and float not in args


def literal_fields(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            yield from literal_fields(tp, key + ".")
        elif typing.get_origin(tp) is typing.Literal:
            yield key, typing.get_args(tp)
        elif tp is bool:
            yield key, (True, False)


def bad_numbers(f, is_int, rng):
    low, high, low_open, _ = field_range(f)
    values = [float("nan"), float("inf"), float("-inf"), "abc", True, [1], {"a": 1}, 10**30, -(10**30)]
    values += [low] if low_open else [low - 1 if is_int else low - abs(low) - 1.5]
    values += [high + 1 if is_int else high * 2 + 1]
    if is_int:
        values += [1.5, rng.choice([low + 0.5, 2.25])]
    if f.default is not None and f.default != "auto":
        values.append(None)
    return values


def _set(doc: dict, dotted: str, value) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        doc = doc.setdefault(part, {})
    doc[parts[-1]] = value


class Writer:
    def __init__(self, root: Path):
        self.root, self.n = root, 0

    def path(self, suffix=".yaml") -> Path:
        self.n += 1
        return self.root / f"case{self.n:04d}{suffix}"

    def doc(self, doc, raw: bytes | None = None) -> Path:
        path = self.path()
        path.write_bytes(raw if raw is not None else yaml.safe_dump(doc, sort_keys=False).encode())
        return path


def _train(path, out) -> list[str]:
    return ["train", str(path), "--out", str(out), "--quiet"]


def broken_configs(root: Path, seed: int = 17) -> list[Case]:
    rng = random.Random(seed)
    w = Writer(root)
    out = root / "out"
    cases: list[Case] = []

    def add(label, doc=None, needles=(), raw=None, path=None):
        p = path or w.doc(doc, raw)
        # each case its own output directory: a case wrongly accepted cannot hide the next
        cases.append(Case(label, _train(p, out / str(len(cases))), (str(p), *needles)))

    # -- numbers of the run's sections
    for section, cls in RUN_SECTIONS.items():
        for key, f, is_int in numeric_fields(cls):
            for value in bad_numbers(f, is_int, rng):
                doc = copy.deepcopy(BASE)
                _set(doc, f"{section}.{key}", value)
                shown = (
                    repr(float(value))
                    if not is_int and isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53
                    else repr(value)
                )  # a float field reads a huge integer as a float
                add(f"{section}.{key}={value!r}", doc, (f"{section}.{key}", shown))
    # -- numbers of a recipe, as overrides in the run file
    for section, cls in RECIPE_SECTIONS.items():
        for key, f, is_int in numeric_fields(cls):
            for value in rng.sample(bad_numbers(f, is_int, rng), 6):
                doc = copy.deepcopy(BASE)
                doc["recipe"] = {"name": OVERRIDE_RECIPE}
                _set(doc["recipe"], f"{section}.{key}", value)
                shown = (
                    repr(float(value))
                    if not is_int and isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53
                    else repr(value)
                )
                add(f"recipe.{section}.{key}={value!r}", doc, (f"recipe.{section}.{key}", shown))
    # -- choices and switches
    for section, cls in RUN_SECTIONS.items():
        for key, allowed in literal_fields(cls):
            for value in ("bogus", 3, None, [allowed[0]]) if allowed != (True, False) else ("yes please", 1, None):
                doc = copy.deepcopy(BASE)
                _set(doc, f"{section}.{key}", value)
                add(f"{section}.{key}={value!r}", doc, (f"{section}.{key}", repr(value)))
    for value in ("gpu", "DSP", 1, None):
        add(f"backend={value!r}", {**BASE, "backend": value}, ("backend", repr(value)))
    for key, _allowed in literal_fields(C.Tensors):
        for value in ("bogus", 7):
            doc = copy.deepcopy(BASE)
            doc["recipe"] = {"name": OVERRIDE_RECIPE}
            _set(doc["recipe"], f"tensors.{key}", value)
            add(f"recipe.tensors.{key}={value!r}", doc, (f"recipe.tensors.{key}", repr(value)))
    # -- what NITI and FP32 do not support (their kernels would ignore it)
    for recipe, key, value in (
        ("niti", "tensors.weights.bits", 4),
        ("niti", "tensors.errors.bits", 16),
        ("niti", "tensors.activations.format", "float32"),
        ("niti", "loss.kind", "softmax_ce"),
        ("niti", "optimizer.kind", "sgd"),
        ("niti", "tensors.gradients.granularity", "channel"),
        ("fp32", "tensors.weights.format", "int"),
        ("fp32", "tensors.errors.bits", 8),
        ("fp32", "loss.kind", "niti_int_ce"),
        ("niti", "integer", False),
    ):
        doc = copy.deepcopy(BASE)
        doc["recipe"] = {"name": recipe}
        _set(doc["recipe"], key, value)
        add(f"{recipe} {key}={value!r}", doc, (f"recipe.{key}", repr(value)))
    # -- unknown keys, at every level
    for dotted in (
        "bogus",
        "train.bogus",
        "model.bogus",
        "data.bogus",
        "memory.bogus",
        "scheduler.bogus",
        "train.learning_rate",
        "model.classes",
        "data.limit",
    ):
        doc = copy.deepcopy(BASE)
        _set(doc, dotted, rng.choice([1, "x", True]))
        add(f"unknown {dotted}", doc, (dotted, "unknown key"))
    for dotted in (
        "bogus",
        "tensors.weights.bogus",
        "optimizer.beta",
        "schedule.warmup",
        "tensors.bogus",
        "tensors.weights.rescale.bogus",
        "loss.bogus",
    ):
        doc = copy.deepcopy(BASE)
        doc["recipe"] = {"name": OVERRIDE_RECIPE}
        _set(doc["recipe"], dotted, 1)
        add(f"unknown recipe.{dotted}", doc, (f"recipe.{dotted}", "unknown key"))
    # -- sections of the wrong type
    for section in ("model", "data", "train", "memory", "scheduler"):
        for value in (5, "x", [1, 2]):
            add(f"{section}={value!r}", {**BASE, section: value}, (section, repr(value)))
    # -- names, paths and specs given as strings
    for value in ("../escape", "a/b", "", ".hidden", "x" * 300, "nul\0byte", 7):
        add(f"name={value!r}", {**BASE, "name": value}, ("name",))
    for value in ("bogus", "trace", "rapl:x", "battery:2", 5):
        add(f"energy={value!r}", {**BASE, "energy": value}, ("energy", repr(value)))
    for value in ("nonexistent", "", "../../etc/passwd", "resnet9000", 5):
        doc = copy.deepcopy(BASE)
        doc["model"]["name"] = value
        add(f"model.name={value!r}", doc, ("model.name", repr(value)))
    for value in ("nonexistent", "../../../etc/passwd", 3):
        doc = copy.deepcopy(BASE)
        doc["scheduler"] = {"device": value}
        add(f"scheduler.device={value!r}", doc, ("scheduler.device", repr(value)))
    for value in ("lots", -5, float("nan"), {0: "x"}, "1e999", True, [], {}, {-1: "1MB"}, "0.5KB", 10**30):
        doc = copy.deepcopy(BASE)
        doc["memory"] = {"budget": value}
        add(f"memory.budget={value!r}", doc, ("memory.budget",))
    add("cifar10 without a path", {**BASE, "data": {"dataset": "cifar10"}}, ("data.path",))
    a_file = w.doc({"x": 1})
    add("out_dir is a file", {**BASE, "out_dir": str(a_file)}, ("out_dir", str(a_file)))
    for value in (5, [1], {}, {"name": 5}, "../../etc/passwd", "nonexistent", "", {"name": "niti", "module": 3}):
        add(f"recipe={value!r}", {**BASE, "recipe": value}, ("recipe",))
    # -- recipe files: module outside the recipes, schedules, params
    niti = yaml.safe_load((C.CONFIG_ROOT / "algorithms" / "niti.yaml").read_text())
    for value in (
        "_emulated",
        "int_residual",
        "os",
        "../niti",
        "niti.sub",
        "",
        "NITI",
        "__init__",
        "sys",
        "_quant",
        "_support",
        5,
        None,
        ["niti"],
    ):
        recipe_file = w.doc({**niti, "module": value})
        add(f"module={value!r}", {**BASE, "recipe": str(recipe_file)}, ("module", repr(value)), path=None)
        cases[-1].needles = (str(recipe_file), "module", repr(value))
    for value in (
        [[0, 9]],
        [[0, 0]],
        [[5, 4], [0, 3]],
        [[0]],
        [[0, 4, 5]],
        [["a", 4]],
        [[-1, 4]],
        "fast",
        [[0, 4.5]],
        [[10**9, 4]],
    ):
        doc = copy.deepcopy(BASE)
        doc["recipe"] = {"name": "niti", "schedule": {"mu": value}}
        add(f"schedule.mu={value!r}", doc, ("recipe.schedule.mu",))
    for value in ([[0, float("nan")]], [[0, -1.0]], [[0, 1e9]], [[0, 0.0]], [[0, float("inf")]], [[0, "x"]]):
        doc = copy.deepcopy(BASE)
        doc["recipe"] = {"name": "fp32", "schedule": {"lr_factor": value}}
        add(f"schedule.lr_factor={value!r}", doc, ("recipe.schedule.lr_factor",))
    for recipe, key, value in (
        ("niti", "anything", 1),
        ("fp32", "warmup", 5),
        ("octo", "bogus", 1),
        ("afp", "low_bits", 0),
        ("afp", "low_bits", float("nan")),
        ("afp", "error_threshold", -1),
        ("afp", "error_threshold", float("inf")),
        ("octo", "prc_momentum", 2),
        ("octo", "prc_momentum", float("nan")),
        ("fp8", "loss_scale", 3),
        ("fp8", "loss_scale", float("inf")),
        ("fp8", "chunk_size", 0),
        ("fp8", "chunk_size", 10**40),
        ("mls", "group_bits", -1),
        ("mls", "group_bits", "x"),
        ("wageubn", "first_last", "sometimes"),
        ("octo", "compensation", "yes"),
    ):
        doc = copy.deepcopy(BASE)
        doc["recipe"] = {"name": recipe, "params": {key: value}}
        add(f"{recipe} params.{key}={value!r}", doc, (f"params.{key}",))
    # -- YAML itself
    good = yaml.safe_dump(BASE, sort_keys=False).encode()
    for key in ("name", "train", "epochs", "model", "recipe"):
        lines = good.decode().splitlines()
        i = next(j for j, line in enumerate(lines) if line.strip().startswith(key + ":"))
        add(
            f"duplicate {key}",
            raw=("\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :]) + "\n").encode(),
            needles=(key, "given twice"),
        )
    for name, raw, needle in (
        ("latin-1", good.replace(b"hostile", "hôstile".encode("latin-1")), "UTF-8"),
        ("utf-16", good.decode().encode("utf-16"), "UTF-16"),
        ("binary", bytes(rng.randrange(256) for _ in range(300)), ""),
        ("nul", good + b"\0", "NUL"),
        ("control", good.replace(b"hostile", b"host\x07ile"), "U+0007"),
        ("tabs", b"name: x\n\ttrain: {}\n", "malformed YAML"),
        ("unclosed", b"name: x\nmodel: {name: lenet5\n", "malformed YAML"),
        ("two documents", good + b"---\n" + good, "documents"),
        ("list", b"- 1\n- 2\n", "mapping"),
        ("scalar", b"just text\n", "mapping"),
        ("python tag", good + b"evil: !!python/object/apply:os.system ['true']\n", "python"),
        ("huge int", good.replace(b"seed: 1", b"seed: " + b"9" * 6000), "cannot read"),
        ("bad date", good + b"when: 2020-13-45\n", "cannot read"),
        ("deep", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nests deeper"),
        ("deep maps", b"".join(b"  " * i + b"k:\n" for i in range(60)), "nests deeper"),
        (
            "laughs",
            b"a: &a [x,x,x,x,x,x,x,x,x,x]\n"
            + b"".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n".encode() for p, c in zip("abcdefg", "bcdefgh")),
            "expands",
        ),
        ("oversize", good + b"# " + b"x" * (300 << 10) + b"\n", "bytes"),
        ("empty", b"", "recipe"),
        ("only comment", b"# nothing\n", "recipe"),
        ("merge key list", b"base: &b {x: 1}\nname: x\n<<: [*b, 5]\n", ""),
    ):
        add(f"yaml {name}", raw=raw, needles=(needle,) if needle else ())
    # -- the path itself
    missing = root / "missing.yaml"
    add("missing", path=missing, needles=("does not exist",))
    directory = root / "adir.yaml"
    directory.mkdir(exist_ok=True)
    add("directory", path=directory, needles=("directory",))
    fifo = root / "fifo.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    add("fifo", path=fifo, needles=("FIFO",))
    loop = root / "loop.yaml"
    if not loop.is_symlink():
        os.symlink(root / "loop2.yaml", loop)
        os.symlink(loop, root / "loop2.yaml")
    add("symlink loop", path=loop, needles=("symlink loop",))
    dangling = root / "dangling.yaml"
    if not dangling.is_symlink():
        os.symlink(root / "nowhere.yaml", dangling)
    add("dangling symlink", path=dangling, needles=("does not exist",))
    for device in ("/dev/zero", "/dev/null", "/dev/urandom"):
        link = root / f"dev{device.replace('/', '_')}.yaml"
        if not link.is_symlink():
            os.symlink(device, link)
        add(f"device {device}", path=link, needles=("device",))
    add("device itself", path=Path("/dev/zero"), needles=("device",))
    notdir = root / "case0001.yaml" / "x.yaml"
    add("file as directory", path=notdir, needles=("non-directory",))
    fifo_recipe = root / "fifo-recipe.yaml"
    if not fifo_recipe.exists():
        os.mkfifo(fifo_recipe)
    add("recipe is a fifo", {**BASE, "recipe": str(fifo_recipe)}, (str(fifo_recipe), "FIFO"))
    fifo_device = root / "fifo-device.yaml"
    if not fifo_device.exists():
        os.mkfifo(fifo_device)
    doc = copy.deepcopy(BASE)
    doc["scheduler"] = {"device": str(fifo_device)}
    add("device profile is a fifo", doc, ("scheduler.device", "FIFO"))
    return cases


def valid_configs(root: Path, seed: int = 5, count: int = 4) -> list[tuple[str, Path]]:
    """In-range variations the generator considers valid: they must train."""
    rng = random.Random(seed)
    w = Writer(root)
    out = []
    for i in range(count):
        doc = copy.deepcopy(BASE)
        doc["train"].update(
            seed=rng.randrange(2**32),
            batch_size=rng.choice([16, 32, 64]),
            eval_batch_size=rng.randrange(1, 64),
            checkpoint_every_steps=rng.randrange(0, 3),
        )
        doc["model"]["num_classes"] = rng.choice([10, 12, 100])
        if i % 2:
            doc["recipe"] = {
                "name": "fp32",
                "optimizer": {
                    "lr": rng.uniform(1e-4, 0.1),
                    "momentum": rng.uniform(0, 0.99),
                    "weight_decay": rng.uniform(0, 1e-3),
                },
            }
        else:
            doc["recipe"] = {"name": "niti", "schedule": {"mu": [[0, rng.randrange(1, 9)]]}}
        out.append((f"valid {i}", w.doc(doc)))
    return out
