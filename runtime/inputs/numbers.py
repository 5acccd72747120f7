"""Numbers in config dataclasses: every int and float field declares the range its users
(the recipe, its kernels, the planner) support, and `build` checks it on load.

    epochs: int = bounded(10, 1, 100_000)
    lr: float = bounded(0.05, 0.0, 10.0, low_open=True)

A field without a declared range still gets DEFAULT_INT / finiteness; the schema test
(tests/hostile/test_config_schema.py) fails for such a field, so a new key is given its
range when it is added.
"""

from __future__ import annotations

import math
from dataclasses import field

DEFAULT_INT = (-(2**31), 2**31 - 1)
RANGE = "range"


def bounded(default, low, high, *, low_open: bool = False, why: str = "", **kw):
    """A dataclass field holding a number in [low, high] ((low, high] with low_open)."""
    meta = {RANGE: (low, high, low_open, why)}
    if callable(default) and not isinstance(default, (int, float)):
        return field(default_factory=default, metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


def number_problem(value, low=None, high=None, low_open: bool = False, why: str = "") -> str | None:
    """Why `value` is not a finite number within the range, or None. Bools are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if low is not None and (value < low or (low_open and value == low)):
        return f"{value!r} must be {'>' if low_open else '>='} {low}" + (f" ({why})" if why else "")
    if high is not None and value > high:
        return f"{value!r} must be <= {high}" + (f" ({why})" if why else "")
    return None


def field_range(f) -> tuple | None:
    return f.metadata.get(RANGE)


def field_problem(f, value) -> str | None:
    """The problem of a built field value against its declared (or the default) range; a
    tuple of numbers (data.normalize's mean and std) is checked element by element."""
    if isinstance(value, tuple) and field_range(f) is not None:
        for i, item in enumerate(value):
            problem = field_problem(f, item)
            if problem:
                return f"[{i}]: {problem}"
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # not a number: the type check handled it
    declared = field_range(f)
    if declared is not None:
        return number_problem(value, *declared)
    if isinstance(value, int):
        return number_problem(value, *DEFAULT_INT)
    return number_problem(value)
