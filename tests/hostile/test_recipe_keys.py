"""Recipe keys a recipe's code does not read are refused by name, never silently
ignored: every seeded override of a tensor field under NITI, WAGEUBN and FP32 is either
a ConfigError naming the key, or changes what two training steps compute."""

from __future__ import annotations

import copy
import random

import dsptrain
import numpy as np
import yaml
from dsptrain.config import load_run
from dsptrain.numerics import QTensor

from .gen_configs import BASE

RECIPES = ("niti", "wageubn", "fp32")
ROLES = ("weights", "activations", "errors", "gradients", "updates")
ALTERNATIVES = {
    "bits": (4, 6, 12, 16),
    "exponent_bits": (3, 5, 9),
    "rounding": ("round", "psto", "sto", "nearest_even"),
    "scale": ("pow2", "float", "none"),
    "granularity": ("channel",),
    "format": ("int", "fp", "float32"),
    "group_size": (4, 16),
    "rescale": ({"min_interval": 8}, {"max_interval": 16}, {"policy": "fixed"}),
}
RECIPES_ALL = ("niti", "wageubn", "fp32", "octo", "afp", "mls", "fp8")
MIN_CASES = 60


def _variants(seed=35):
    rng = random.Random(seed)
    out = []
    for recipe in RECIPES:
        for role in ROLES:
            for key, values in ALTERNATIVES.items():
                out.append((recipe, role, key, rng.choice(values)))
    return out


def _run(tmp_path, recipe, tensors=None):
    doc = copy.deepcopy(BASE)
    doc["recipe"] = {"name": recipe, **({"tensors": tensors} if tensors else {})}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_run(path)


def _two_steps(run) -> dict:
    gen = np.random.default_rng(0)
    images = gen.integers(0, 256, (16, 28, 28, 1), dtype=np.uint8)
    labels = gen.integers(0, 10, 16)
    trainer = dsptrain.Trainer(run, progress=False, backend="ref")
    try:
        for _ in range(2):
            trainer.step(images, labels)
        return {k: (v.q.copy(), v.e) if isinstance(v, QTensor) else np.array(v) for k, v in trainer.state.items()}
    finally:
        trainer.close()


def _same(a, b) -> bool:
    def eq(x, y):
        if isinstance(x, tuple):
            return np.array_equal(x[0], y[0]) and x[1] == y[1]
        return np.array_equal(x, y)

    return a.keys() == b.keys() and all(eq(a[k], b[k]) for k in a)


def test_fields_no_recipe_reads_are_refused_under_every_recipe(tmp_path):
    """exponent_bits outside fp, group_size outside group granularity, adaptive intervals
    under another policy: refused by name whatever the recipe."""
    failures = []
    for recipe in RECIPES_ALL:
        base = dsptrain.load_recipe(recipe)
        for role in ROLES:
            spec = getattr(base.tensors, role)
            bad = {}
            if spec.format != "fp":
                bad["exponent_bits"] = 9
            if spec.granularity != "group":
                bad["group_size"] = 16
            if spec.rescale.policy != "adaptive":
                bad["rescale"] = {"min_interval": 8}
            for key, value in bad.items():
                try:
                    _run(tmp_path, recipe, {role: {key: value}})
                    failures.append(f"{recipe} tensors.{role}.{key}={value!r}: accepted")
                except dsptrain.ConfigError as exc:
                    if f"tensors.{role}.{key}" not in str(exc):
                        failures.append(f"{recipe} tensors.{role}.{key}: {exc}")
    assert not failures, "\n".join(failures)


def test_every_tensor_override_is_refused_by_name_or_honoured(tmp_path):
    variants = _variants()
    assert len(variants) >= MIN_CASES
    baselines, failures, refused, honoured = {}, [], 0, 0
    for recipe, role, key, value in variants:
        label = f"{recipe} tensors.{role}.{key}={value!r}"
        base = dsptrain.load_recipe(recipe)
        if getattr(getattr(base.tensors, role), key) == value:
            continue  # the recipe's own value: nothing to refuse
        try:
            run = _run(tmp_path, recipe, {role: {key: value}})
            if run.recipe.tensors == base.tensors:
                continue  # the override spells the recipe's own value
        except dsptrain.ConfigError as exc:
            if f"tensors.{role}." not in str(exc):  # this key, or the one it makes wrong (fp: exponent_bits)
                failures.append(f"{label}: refused without naming the key: {exc}")
            refused += 1
            continue
        except Exception as exc:  # noqa: BLE001 -- what the test looks for
            failures.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        if key == "rescale" and "policy" not in value and getattr(base.tensors, role).rescale.policy == "adaptive":
            continue  # an adaptive interval acts after many steps: tests/null/test_sched_rescale.py covers it
        if recipe not in baselines:
            baselines[recipe] = _two_steps(_run(tmp_path, recipe))
        try:
            state = _two_steps(run)
        except dsptrain.DsptrainError as exc:  # refused when the model is lowered: fine, by name
            if key not in str(exc):
                failures.append(f"{label}: refused at lowering without naming the key: {exc}")
            refused += 1
            continue
        if _same(state, baselines[recipe]):
            failures.append(f"{label}: accepted and ignored (two steps bit-identical to the recipe's own)")
        honoured += 1
    print(f"{refused} refused by name, {honoured} honoured")
    assert not failures, f"{len(failures)} of {refused + honoured + len(failures)}:\n" + "\n".join(failures)
