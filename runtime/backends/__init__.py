"""Backends are found by name: `ops_<name>.py` in this folder holds one Backend subclass.

PRIORITY is the placement order: an op goes to the first backend that is available
and supports it; `ref` (NumPy) comes last and supports everything.
"""
from __future__ import annotations

import importlib
import inspect

from .base import Backend

PRIORITY = ("dsp", "cpu", "ref")


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass defined in `ops_<name>.py`."""
    if name not in PRIORITY:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(PRIORITY)}")
    module = importlib.import_module(f"{__name__}.ops_{name}")
    for value in vars(module).values():
        if inspect.isclass(value) and issubclass(value, Backend) and value.__module__ == module.__name__:
            return value
    raise ImportError(f"{module.__name__} defines no Backend subclass")


def availability() -> dict[str, tuple[bool, str]]:
    """For each backend: (usable here, why). Never raises."""
    report = {}
    for name in PRIORITY:
        try:
            report[name] = backend_class(name).available()
        except Exception as exc:  # an import error is an answer here, not a crash
            report[name] = (False, f"cannot load: {exc}")
    return report
