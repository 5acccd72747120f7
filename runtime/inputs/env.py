"""Every DSPTRAIN_* environment variable in one table, each with its parser.

Environment variables only debug or point at tools (YAML says what to train). A set
variable with a bad value is a ConfigError naming the variable and the value, raised
by `check_all()` before anything reads it (the command and the Trainer call it);
`get(name)` returns the parsed value or the default. The README's table of variables
lists exactly these names (tests/hostile/test_env.py checks it).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

SOURCE = "environment"


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("", "0", "false", "no", "off"):
        return False
    if lowered in ("1", "true", "yes", "on"):
        return True
    raise ValueError("expected 1 or 0")


def _choice(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in names:
            raise ValueError(f"expected one of {', '.join(names)}")
        return text

    return parse


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not re.fullmatch(r"\s*\d{1,12}\s*", text):
            raise ValueError(f"expected a whole number in {low}..{high}")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"expected a whole number in {low}..{high}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected seconds, a number > 0") from None
    if not math.isfinite(value) or not 0 < value <= 86400:
        raise ValueError("expected seconds, a number > 0 and at most 86400")
    return value


def _regex(text: str) -> str:
    if len(text) > 1000:
        raise ValueError("a regular expression of more than 1000 characters")
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return text


def _directory(must_exist: bool) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip() or "\x00" in text:
            raise ValueError("expected a directory path")
        if must_exist and not os.path.isdir(text):
            raise ValueError("is not a directory")
        if not must_exist and os.path.exists(text) and not os.path.isdir(text):
            raise ValueError("exists and is not a directory")
        return text

    return parse


def _library(text: str) -> str:
    """A shared library: a bare name the loader finds on its path, or a path that must exist."""
    if not text.strip() or "\x00" in text:
        raise ValueError("expected a library name or path")
    if "/" in text and not os.path.isfile(text):
        raise ValueError("is not a file")
    return text


@dataclass(frozen=True)
class Variable:
    name: str
    parse: Callable[[str], Any]
    default: Any
    effect: str


VARIABLES = {
    v.name: v
    for v in (
        Variable("DSPTRAIN_DEBUG", _flag, False, "print every op's placement and the reason for it"),
        Variable("DSPTRAIN_CPU_ONLY_OPS", _regex, None, "keep ops whose name or kind matches off the DSP"),
        Variable(
            "DSPTRAIN_CPU_ISA",
            _choice("amx", "avx512vnni", "avxvnni", "avx2", "neon", "scalar"),
            None,
            "force the CPU kernels' instruction set",
        ),
        Variable("DSPTRAIN_CPU_THREADS", _int(1, 1024), None, "threads of the CPU kernels"),
        Variable("DSPTRAIN_BLAS_THREADS", _int(1, 1024), 1, "BLAS threads once the cpu backend starts"),
        Variable("DSPTRAIN_BUILD_JOBS", _int(1, 1024), None, "files the native extension compiles at once"),
        Variable("DSPTRAIN_DSP", _choice("emulated", "fastrpc", "auto"), "auto", "which DSP transport to use"),
        Variable("DSPTRAIN_DSP_TIMEOUT", _seconds, 120.0, "seconds after which a DSP call is a hang"),
        Variable("DSPTRAIN_CDSPRPC", _library, None, "the FastRPC library to load"),
        Variable("DSPTRAIN_DSP_ARENA_MB", _int(1, 65536), 256, "size of the shared tensor arena"),
        Variable("DSPTRAIN_DSP_KERNELS", _directory(True), None, "where the HVX sources are"),
        Variable(
            "DSPTRAIN_CACHE",
            _directory(False),
            None,
            "dsptrain's cache: the emulated DSP server's build, image folders' decoded photos",
        ),
        Variable("DSPTRAIN_NATIVE_DEBUG", _flag, False, "build the native extension with -O0 -g"),
    )
}


def get(name: str, environ=None):
    """The parsed value of variable `name` (default when unset); ConfigError when bad."""
    var = VARIABLES[name]
    text = (os.environ if environ is None else environ).get(name)
    if text is None:
        return var.default
    try:
        return var.parse(text)
    except ValueError as exc:
        raise ConfigError(SOURCE, name, f"{text[:200]!r}: {exc}") from None


def check_all(environ=None) -> None:
    """Parse every DSPTRAIN_* variable that is set; warn about names not in the table."""
    environ = os.environ if environ is None else environ
    for name in sorted(environ):
        if not name.startswith("DSPTRAIN_"):
            continue
        if name in VARIABLES:
            get(name, environ)
        else:
            warnings.warn(
                f"environment variable {name} is not one dsptrain reads (known: {', '.join(VARIABLES)})",
                RuntimeWarning,
                stacklevel=2,
            )
