"""Every number a config can hold declares the range its users support, so a key added
later is checked like the others (inputs/numbers.py)."""

import dataclasses
import typing

from dsptrain import config as C
from dsptrain.inputs.numbers import field_range


def _dataclasses():
    seen, todo = [], [C.RunConfig, C.Recipe, C.DeviceProfile]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        for tp in typing.get_type_hints(cls).values():
            for t in (tp, *typing.get_args(tp)):
                if dataclasses.is_dataclass(t):
                    todo.append(t)
    return seen


def test_every_numeric_field_declares_its_range():
    missing = []
    for cls in _dataclasses():
        for f in dataclasses.fields(cls):
            args = typing.get_args(typing.get_type_hints(cls)[f.name]) or (typing.get_type_hints(cls)[f.name],)
            numeric = (int in args or float in args) and str not in args  # sizes: memory.budget.size_setting
            if numeric and field_range(f) is None:
                missing.append(f"{cls.__name__}.{f.name}")
    assert not missing, f"give these fields a range with bounded(...): {missing}"


def test_ranges_hold_their_defaults():
    for cls in _dataclasses():
        for f in dataclasses.fields(cls):
            r = field_range(f)
            if r and isinstance(f.default, (int, float)) and not isinstance(f.default, bool):
                low, high, low_open, _ = r
                assert (low < f.default if low_open else low <= f.default) and f.default <= high, f.name
