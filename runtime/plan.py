"""Placement and the plan cache: which backend runs each op, and why.

Backends are walked in priority order (dsp, cpu, ref); an op goes to the first one
that supports it. Every decision keeps its reason: DSPTRAIN_DEBUG=1 prints them,
DSPTRAIN_CPU_ONLY_OPS=<regex> keeps matching ops (by name or kind) off the DSP.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

from .graph import TrainGraph


@dataclass(frozen=True)
class Placement:
    backend: str
    reason: str
    declined: tuple[tuple[str, str], ...] = ()   # (backend, why not) for those tried first


@dataclass
class Plan:
    graph: TrainGraph
    placement: dict[str, Placement]
    order: tuple[str, ...]                        # backend names, priority order
    stats: dict = field(default_factory=dict)

    def backend_of(self, op) -> str:
        return self.placement[op.name].backend

    def fallbacks(self, op, failed: str) -> list[str]:
        """Backends after `failed` in priority order, for re-running `op`."""
        return [name for name in self.order[self.order.index(failed) + 1:]]

    def op_bytes(self, op) -> int:
        """Bytes `op` reads and writes at the planned batch (for the energy estimate)."""
        cached = self.stats.setdefault("op_bytes", {})
        if op.name not in cached:
            tensors = self.graph.tensors
            cached[op.name] = sum(tensors[t].nbytes for t in (*op.inputs, *op.outputs) if t in tensors)
        return cached[op.name]

    def describe(self) -> str:
        width = max(len(op.name) for op in self.graph.ops) if self.graph.ops else 10
        lines = [f"placement of {len(self.graph.ops)} ops ({self.graph.recipe}, batch {self.graph.batch}):"]
        for op in self.graph.ops:
            p = self.placement[op.name]
            declined = "; ".join(f"not {b}: {why}" for b, why in p.declined)
            lines.append(f"  {op.name:<{width}}  -> {p.backend:<4} {p.reason}" + (f" ({declined})" if declined else ""))
        return "\n".join(lines)


def cpu_only_pattern() -> re.Pattern | None:
    text = os.environ.get("DSPTRAIN_CPU_ONLY_OPS")
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        from .errors import ConfigError

        raise ConfigError("DSPTRAIN_CPU_ONLY_OPS", None, f"{text!r} is not a regular expression: {exc}") from None


def place(graph: TrainGraph, backends: dict, ops=None) -> Plan:
    """Place every op of `graph` (or `ops`) on the first backend of `backends` that takes it."""
    forced_off_dsp = cpu_only_pattern()
    placement = {}
    for op in ops if ops is not None else graph.ops:
        declined = []
        for name, backend in backends.items():
            if name == "dsp" and forced_off_dsp and (forced_off_dsp.search(op.name) or forced_off_dsp.search(op.kind)):
                declined.append((name, "forced off the DSP by DSPTRAIN_CPU_ONLY_OPS"))
                continue
            ok, why = backend.supports(op)
            if ok:
                placement[op.name] = Placement(name, why, tuple(declined))
                break
            declined.append((name, why))
        else:
            raise RuntimeError(f"no backend can run {op.name} ({op.kind}): " +
                               "; ".join(f"{b}: {why}" for b, why in declined))
    plan = Plan(graph, placement, tuple(backends))
    if os.environ.get("DSPTRAIN_DEBUG"):
        print(plan.describe(), file=sys.stderr)
    return plan


class PlanCache:
    """Plans by (batch, training): a partial last batch or an evaluation gets its own,
    and a plan is prepared on its backends once, then reused every step."""

    def __init__(self, build):
        self._build = build
        self._plans: dict = {}
        self.builds = 0

    def get(self, batch: int, training: bool) -> Plan:
        key = (batch, training)
        if key not in self._plans:
            self._plans[key] = self._build(batch, training)
            self.builds += 1
        return self._plans[key]

    def clear(self) -> None:
        self._plans.clear()
