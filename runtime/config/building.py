"""YAML to dataclasses: read a mapping from a file with limits, fill a dataclass from it
(every key checked against the field it fills: unknown key, wrong type, value out of
the field's declared range raise ConfigError naming file, dotted key and value)."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError
from ..inputs import field_problem, number_problem

CONFIG_ROOT = Path(__file__).resolve().parent.parent.parent / "configs"


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
        if len(errors) == 1 and isinstance(value, dict):  # `X | None` given a mapping: X's own complaint
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
        except OverflowError:  # an integer beyond float range
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
    raise TypeError(f"config cannot build {tp}")


def build(cls, data: dict, source, prefix: str = "", given: dict | None = None):
    """Fill dataclass `cls` from `data`; unknown keys and bad values raise ConfigError.

    `given` holds fields already built by the caller; the file may not set them.
    """
    given = given or {}
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)} - set(given)
    for key in data:
        if key not in names:
            raise ConfigError(source, f"{prefix}.{key}".lstrip("."), f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = dict(given)
    for f in dataclasses.fields(cls):
        if f.name in given:
            continue
        key = f"{prefix}.{f.name}".lstrip(".")
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], source, key)
            problem = field_problem(f, kwargs[f.name])  # the range the field declares
            if problem:
                raise ConfigError(source, key, problem)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(source, key, "is required")
    return cls(**kwargs)


def merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _FileProblem(Exception):
    pass


def read_yaml(path: Path) -> dict:
    """A YAML mapping from a regular file, read with limits (inputs/yaml_limits.py)."""
    from ..inputs import YamlLimits, YamlProblem, load_yaml, read_limited

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
