"""Plans by batch size and mode, built once each."""

from __future__ import annotations

from .plan import Plan


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
