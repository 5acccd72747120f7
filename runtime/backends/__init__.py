"""Backends are found by name: `ops_<name>.py` in this folder holds one Backend subclass.

The backend names are spelled here and nowhere else in the runtime: everything outside
backends/ (the CLI's choices, the config's validation, placement, co-scheduling) uses
these names. PRIORITY is the placement order: an op goes to the first backend that is
available and supports it; `ref` (NumPy) comes last and supports everything.
"""

from __future__ import annotations

import importlib
import inspect

from .base import Backend

PRIORITY = ("dsp", "cpu", "ref")
CHOICES = ("auto", *PRIORITY)  # --backend and a run's `backend:`
ACCELERATOR = "dsp"  # the offload target: the device profile's `dsp.*`, co-scheduling's second processor
HOST = "cpu"  # the host's native kernels: where ops the accelerator declines go
# The device profile part (configs/devices/*.yaml: dsp.*, cpu.*) whose speeds and memories
# each backend runs with.
PROCESSOR = {"dsp": "dsp", "cpu": "cpu", "ref": "cpu"}


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


def select(choice: str) -> dict[str, Backend]:
    """Backend instances for the choice `choice` (one of CHOICES), in priority order, the
    fallbacks included.

    A named backend must be usable (else a UserError saying why); `auto` takes every
    usable backend that wants to be chosen automatically (not the emulated DSP).
    `ref` is always last: it runs everything.
    """
    from ..errors import UserError

    if choice not in CHOICES:
        raise UserError(f"backend {choice!r} is not one of {', '.join(CHOICES)}")
    wanted = PRIORITY[PRIORITY.index(choice) :] if choice != "auto" else PRIORITY
    found = availability()
    chosen = {}
    for name in wanted:
        ok, why = found[name]
        if ok and choice == "auto":
            ok, why = backend_class(name).chosen_by_auto()
        if ok:
            chosen[name] = backend_class(name)()
        elif name == choice:
            raise UserError(f"backend {name!r} is not available: {why}")
    return chosen
