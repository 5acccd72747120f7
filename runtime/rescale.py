"""Self-adaptive rescaling (Mandheling): skip a product's range estimate while its shift holds.

NITI requantizes every forward and error product by the range of its int32 result
(`activation_shift(max|acc|)`): a pass over the accumulators before the rounding pass.
Mandheling observed that a layer's shift rarely moves between steps, so it estimates it
on a schedule instead. Here, per op (one layer and tensor role: activations for the
forward product, errors for the error product), the controller

- passes the shift it knows as a *given shift* (`StepContext.shifts`, read by the ops
  through `ctx.given_shift(op)`) on the steps between checks;
- lets the op estimate it on a check step; when the estimate equals the known shift the
  interval doubles (up to the role's `rescale.max_interval`), when it moved the interval
  drops back to `rescale.min_interval`;
- is told at once when a given shift is too small: the backend's requantize sees every
  accumulator anyway, checks the range in the same pass, and uses the estimated shift
  instead of one that would saturate (backends/base.py); that counts as an estimate and
  resets the interval. A given shift that is too large (the range shrank) is caught at
  the next check.

What a skipped estimate saves is the range pass, so the check in the rounding pass must
cost less than that pass: on the DSP (round mode, 4 HVX threads) the rounding pass keeps
its peak rounded magnitude for one vmax per two vectors, 0.165 packets an element against
0.220 for an estimate (range pass 0.063 + rounding 0.157); a given shift that gives way
costs 0.32 (the peak names the shift; 0.38 when it must read the range). So a role gains
while fewer than about a third of its given shifts give way (MobileNetV2: 9 %).

So on stable shifts the step is exactly NITI's dynamic rescaling, and a jump up is
followed within the step it happens in. The weight-gradient shift is not controlled: it
is taken inside the update (`niti_update_s8`), which reads the gradient once to subtract
it, on a weight-sized tensor orders of magnitude smaller than the activations.

Which roles adapt is the recipe's `tensors.<role>.rescale.policy` (dynamic | fixed |
adaptive); `scheduler.adaptive_rescale: false` makes every role dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass

from .algorithms import takes_given_shift

ROLE_OF_PHASE = {"forward": "activations", "backward": "errors"}


@dataclass
class OpShift:
    """What the controller knows of one op's shift."""

    shift: int
    interval: int
    next_check: int
    estimates: int = 0  # steps where the range estimate ran (checks and saturation fallbacks)
    skipped: int = 0  # steps where the given shift was used as is
    fallbacks: int = 0  # given shifts that would have saturated


class RescaleController:
    """Given shifts for each step, and what each step's shifts teach about the next."""

    def __init__(self, recipe, enabled: bool = True):
        self.recipe = recipe
        self.enabled = enabled and takes_given_shift(recipe)
        self.ops: dict[str, OpShift] = {}
        self._adaptive: dict[int, tuple] = {}  # id(graph) -> (graph, its ops that adapt, with their policy)

    def policy(self, op):
        """The Rescale of `op`'s tensor role when it adapts, else None (asked once per graph:
        adaptive_ops keeps the answers)."""
        role = ROLE_OF_PHASE.get(op.phase)
        if not (self.enabled and role is not None and op.is_requant()):
            return None
        rescale = getattr(self.recipe.tensors, role).rescale
        return rescale if rescale.policy in ("adaptive", "fixed") else None

    def adaptive_ops(self, graph) -> list[tuple]:
        """(op, its Rescale) for the ops of `graph` whose shift adapts, in graph order; found
        once per graph (a LeNet-5 step asked policy() 43 times a step, 40 us at one thread)."""
        held = self._adaptive.get(id(graph))
        if held is not None and held[0] is graph:
            return held[1]
        ops = [(op, rescale) for op in graph.ops if (rescale := self.policy(op)) is not None]
        self._adaptive[id(graph)] = (graph, ops)
        return ops

    def shifts_for(self, step: int, graph) -> dict[str, int] | None:
        """op name -> given shift for the ops not due for a check at `step`."""
        if not self.enabled:
            return None
        given = {}
        for op, _ in self.adaptive_ops(graph):
            state = self.ops.get(op.name)
            if state is not None and step < state.next_check:
                given[op.name] = state.shift
        return given or None

    def observe(self, step: int, graph, used: dict[str, int], given: dict[str, int] | None) -> None:
        """Learn from the shifts `step` used (op name -> shift) with `given` ones in force."""
        if not self.enabled:
            return
        given = given or {}
        for op, rescale in self.adaptive_ops(graph):
            if op.name not in used:
                continue
            shift = int(used[op.name])
            state = self.ops.get(op.name)
            lo, hi = max(rescale.min_interval, 1), max(rescale.max_interval, 1)
            if rescale.policy == "fixed":
                lo = hi = 1 << 62
            if state is None:
                self.ops[op.name] = OpShift(shift, lo, step + lo, estimates=1)
                continue
            if op.name in given:
                if shift == given[op.name]:
                    state.skipped += 1
                    continue
                state.fallbacks += 1  # a stale shift caught by the saturation check
            state.estimates += 1
            state.interval = min(state.interval * 2, hi) if shift == state.shift else lo
            state.shift = shift
            state.next_check = self._staggered(step, state)

    def _staggered(self, step: int, state: OpShift) -> int:
        """The step of `state`'s next check: `interval` steps on, or up to half of it earlier
        when that step has fewer other ops due. Checks that fall in the same step make
        co-scheduling synchronise its micro-batches at each of those ops (the full batch's
        shift needs every slice's range), so spreading them keeps most steps free of
        synchronisation; checking earlier than the interval is always safe (only a given
        shift that is too large waits for a check)."""
        due: dict[int, int] = {}
        for other in self.ops.values():
            if other is not state:
                due[other.next_check] = due.get(other.next_check, 0) + 1
        latest = step + state.interval
        # at most one step per op is needed to find a free one (and a `fixed` policy's
        # interval of 2**62 must not become a search)
        earliest = max(step + max((state.interval + 1) // 2, 1), latest - len(self.ops))
        return min(range(latest, earliest - 1, -1), key=lambda s: due.get(s, 0))

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run gives the shifts an unbroken one would."""
        return {
            name: [s.shift, s.interval, s.next_check, s.estimates, s.skipped, s.fallbacks]
            for name, s in self.ops.items()
        }

    def restore(self, state: dict) -> None:
        self.ops = {name: OpShift(*map(int, values)) for name, values in state.items()}

    def summary(self) -> dict[str, dict]:
        """Per op: estimates run, estimates skipped, saturation fallbacks, the shift, the interval."""
        return {
            name: {
                "estimates": s.estimates,
                "skipped": s.skipped,
                "fallbacks": s.fallbacks,
                "shift": s.shift,
                "interval": s.interval,
            }
            for name, s in self.ops.items()
        }

    def skipped_fraction(self) -> float:
        done = sum(s.estimates + s.skipped for s in self.ops.values())
        return sum(s.skipped for s in self.ops.values()) / done if done else 0.0
