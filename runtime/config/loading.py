"""The public loaders: a recipe by name or path (with a run's overrides layered on),
a run config from a file or from a mapping already read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import ConfigError
from .building import CONFIG_ROOT, build, merge, read_yaml
from .checks import SAFE_NAME, check_recipe, check_run
from .schema import Recipe, RunConfig


def recipe_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        return path
    if not SAFE_NAME.match(name_or_path):  # a name, not a way out of configs/algorithms/
        raise ConfigError("recipe", None, f"{name_or_path!r} is neither a recipe name nor a .yaml path")
    return CONFIG_ROOT / "algorithms" / f"{name_or_path}.yaml"


def load_recipe(name_or_path: str, overrides: dict | None = None) -> Recipe:
    """A recipe by name (configs/algorithms/<name>.yaml) or path, with optional overrides."""
    path = recipe_path(name_or_path)
    if not path.exists():
        known = sorted(p.stem for p in (CONFIG_ROOT / "algorithms").glob("*.yaml"))
        raise ConfigError(path, None, f"no such recipe (known: {', '.join(known)})")
    data = merge(read_yaml(path), overrides or {})
    return check_recipe(build(Recipe, data, path), path)


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
    for name in (
        [recipe_spec]
        if isinstance(recipe_spec, str)
        else [recipe_spec.get("name")]
        if isinstance(recipe_spec, dict)
        else []
    ):
        if isinstance(name, str) and Path(name).suffix not in (".yaml", ".yml") and not SAFE_NAME.match(name):
            raise ConfigError(
                path,
                "recipe" if isinstance(recipe_spec, str) else "recipe.name",
                f"{name!r} is neither a recipe name nor a .yaml path",
            )
    if isinstance(recipe_spec, str):
        if not recipe_path(recipe_spec).exists():  # name the run file's key, and the closest recipe
            import difflib

            known = sorted(p.stem for p in (CONFIG_ROOT / "algorithms").glob("*.yaml"))
            close = difflib.get_close_matches(recipe_spec, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                path,
                "recipe",
                f"{recipe_spec!r}: no such recipe in {CONFIG_ROOT / 'algorithms'} (known: {', '.join(known)}){hint}",
            )
        try:
            recipe = load_recipe(recipe_spec)
        except ConfigError as exc:  # the recipe file cannot be read at all: point at the run file too
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
    if isinstance(data.get("model"), str):  # `model: lenet5`, as `recipe: niti` names a recipe
        data["model"] = {"name": data["model"]}
    data.setdefault("name", path.stem)
    run = build(RunConfig, data, path, given={"recipe": recipe, "source": str(path)})
    run = dataclasses.replace(run, **overrides) if overrides else run
    check_run(run, path)
    return run
