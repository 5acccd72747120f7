"""A recipe's resolved settings as plain data: what a checkpoint stores (train/checkpoints.py)
so that resuming and exporting use the settings the weights were trained with, not the
recipe file's defaults; and the Recipe rebuilt from them."""

from __future__ import annotations

import dataclasses
import json

from ..errors import ConfigError
from .loading import load_recipe
from .schema import Recipe


def recipe_settings(recipe: Recipe) -> dict:
    """Every field of `recipe`, nested, as JSON values (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(recipe)))


def recipe_from_settings(settings: dict, source) -> Recipe:
    """The Recipe `settings` describe: its recipe file with every stored field laid over it, and
    checked as a run's recipe overrides are (ConfigError naming `source` and the key)."""
    if not isinstance(settings, dict) or not isinstance(settings.get("name"), str):
        raise ConfigError(source, "recipe_settings", f"{_short(settings)} is not a recipe's settings (no name)")
    overrides = {k: v for k, v in settings.items() if k != "name"}
    try:
        return load_recipe(settings["name"], overrides)
    except ConfigError as exc:
        key = f"recipe_settings.{exc.key}" if exc.key else "recipe_settings"
        raise ConfigError(source, key, exc.detail if hasattr(exc, "detail") else str(exc)) from None


def first_difference(stored, wanted, key: str = "") -> tuple[str, object, object] | None:
    """The first dotted key where `stored` and `wanted` differ, with both values; None if equal."""
    if isinstance(stored, dict) and isinstance(wanted, dict):
        for k in list(wanted) + [k for k in stored if k not in wanted]:
            found = first_difference(stored.get(k, _MISSING), wanted.get(k, _MISSING), f"{key}.{k}" if key else str(k))
            if found:
                return found
        return None
    return None if stored == wanted and type(stored) is type(wanted) else (key, stored, wanted)


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


_MISSING = _Missing()


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
