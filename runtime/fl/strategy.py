"""FedAvg with exact integer aggregation, update validation and a resumable round count.

A subclass of Flower's FedAvg (flwr.serverapp.strategy.FedAvg). What it changes:

- every reply is checked whole (validate.py) before anything is averaged or Flower sees
  it: one ArrayRecord and one MetricRecord, the metrics' keys, types and ranges, the
  tensors' names, shapes, dtypes, exponents and values, the example count against
  `max_examples`; a failed client, a malformed or out-of-range reply is logged with its
  reason and left out, and a reply that breaks in an unforeseen way too: a round never
  crashes the server;
- `aggregation` picks the rule (robust.py): exact FedAvg, or norm clipping, trimmed
  mean or median against valid but hostile updates, and `max_weight` caps one client's
  share; each client a rule cut back is named in the round's log and report;
- fewer valid updates than `min_train_nodes` leave the global model unchanged for that
  round (the minimum is honoured on what arrives, not only on what is sampled);
- integer weights are averaged exactly (aggregate.py); float weights by the
  example-weighted mean in float64 (FedAvg's arithmetic on the decoded state);
- `round_offset` lets a restarted server number its rounds from its checkpoint;
- waiting for clients to connect is bounded by `connect_timeout_s` (Flower's sampler
  waits forever).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from ..errors import UserError
from .aggregate import aggregate_state
from .records import from_record, to_record
from .robust import AGGREGATIONS, capped_weights, robust_state
from .validate import EVALUATE_METRICS, MAX_EXAMPLES, TRAIN_METRICS, UpdateError, check_metrics, check_update

log = logging.getLogger("dsptrain.fl")


class IntegerFedAvg(FedAvg):
    def __init__(
        self,
        global_state: dict,
        *,
        integer: bool,
        bits: int = 8,
        rounding: str = "round",
        max_exponent_shift: int = 4,
        round_offset: int = 0,
        connect_timeout_s: float = 600.0,
        aggregation: str = "fedavg",
        max_examples: int = MAX_EXAMPLES,
        max_weight: float = 1.0,
        clip_norm: float = 0.0,
        trim: float = 0.2,
        **fedavg,
    ):
        super().__init__(**fedavg)
        if aggregation not in AGGREGATIONS:
            raise UserError(f"fl.aggregation {aggregation!r} is not one of {', '.join(AGGREGATIONS)}")
        self.aggregation, self.max_examples, self.max_weight = aggregation, max_examples, max_weight
        self.clip_norm, self.trim = clip_norm, trim
        self.global_state = dict(global_state)
        self.integer, self.bits, self.rounding = integer, bits, rounding
        self.max_exponent_shift = max_exponent_shift
        self.round_offset = round_offset
        self.connect_timeout_s = connect_timeout_s
        self.reports: dict[int, dict] = {}  # per round: accepted, rejected and failed clients
        self.sampled: dict[int, int] = {}  # per round: clients asked to train

    # ------------------------------------------------------------ sampling
    def _wait_for_nodes(self, grid: Grid) -> None:
        deadline = time.monotonic() + self.connect_timeout_s
        want = max(self.min_available_nodes, self.min_train_nodes)
        while (have := len(list(grid.get_node_ids()))) < want:
            if time.monotonic() > deadline:
                raise UserError(
                    f"only {have} of the {want} clients needed connected within "
                    f"{self.connect_timeout_s:g} s (fl.round_timeout_s)"
                )
            time.sleep(0.5)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._wait_for_nodes(grid)
        messages = list(super().configure_train(server_round + self.round_offset, arrays, config, grid))
        self.sampled[server_round + self.round_offset] = len(messages)
        return messages

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0:
            return []
        self._wait_for_nodes(grid)
        return super().configure_evaluate(server_round + self.round_offset, arrays, config, grid)

    # ------------------------------------------------------------ aggregation
    def screen(self, server_round: int, replies: Iterable[Message]) -> tuple[list[Message], list[tuple], dict]:
        """(valid replies, their decoded (node, state, examples), the round's report); logs every exclusion."""
        report = {"accepted": [], "rejected": [], "failed": [], "clients": [], "clipped": []}
        valid, decoded = [], []
        for msg in replies:
            node = msg.metadata.src_node_id
            if msg.has_error():
                report["failed"].append({"node": node, "reason": msg.error.reason})
                log.warning("round %d: client %d failed: %s", server_round, node, msg.error.reason)
                continue
            try:
                state, examples, metrics = self._decode(msg)
                check_update(state, examples, self.global_state, self.bits, self.max_exponent_shift, self.max_examples)
            except Exception as exc:  # UpdateError, or a reply broken in a way no check foresaw
                reason = str(exc) if isinstance(exc, UpdateError) else f"malformed reply ({type(exc).__name__}: {exc})"
                report["rejected"].append({"node": node, "reason": reason})
                log.warning("round %d: update from client %d rejected: %s", server_round, node, reason)
                continue
            report["accepted"].append(node)
            report["clients"].append(dict(metrics))
            valid.append(msg)
            decoded.append((node, state, examples))
        return valid, decoded, report

    def _decode(self, msg: Message, expected: tuple[str, ...] = TRAIN_METRICS) -> tuple[dict | None, int, MetricRecord]:
        content = msg.content
        arrays_wanted = 1 if expected is TRAIN_METRICS else 0
        if (
            len(content.array_records) != arrays_wanted
            or len(content.metric_records) != 1
            or len(content.config_records)
        ):
            raise UpdateError(
                f"expected {arrays_wanted} ArrayRecord and one MetricRecord, got "
                f"{len(content.array_records)} ArrayRecords, {len(content.metric_records)} "
                f"MetricRecords and {len(content.config_records)} ConfigRecords"
            )
        metrics = next(iter(content.metric_records.values()))
        examples = check_metrics(metrics, expected, self.max_examples)
        if not arrays_wanted:
            return None, examples, metrics
        arrays = next(iter(content.array_records.values()))
        return from_record(arrays, "update"), examples, metrics

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        server_round += self.round_offset
        replies = list(replies)
        valid, decoded, report = self.screen(server_round, replies)
        # a client that never answered (timed out, or its node vanished) is only missing
        report["missing"] = max(0, self.sampled.get(server_round, len(replies)) - len(replies))
        if report["missing"]:
            log.warning(
                "round %d: %d of %d sampled clients did not reply in time",
                server_round,
                report["missing"],
                self.sampled[server_round],
            )
        self.reports[server_round] = report
        if len(valid) < self.min_train_nodes:
            log.warning(
                "round %d: %d valid updates, fewer than the minimum %d: the global model is unchanged",
                server_round,
                len(valid),
                self.min_train_nodes,
            )
            return None, None
        try:
            state = self._aggregate(server_round, decoded, report)
        except Exception as exc:  # never a crashed server: the round keeps the global model
            report["failed"].append({"node": None, "reason": f"aggregation failed ({type(exc).__name__}: {exc})"})
            log.error(
                "round %d: aggregation failed (%s: %s): the global model is unchanged",
                server_round,
                type(exc).__name__,
                exc,
            )
            return None, None
        self.global_state = state
        arrays = to_record(state, list(self.global_state))
        metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        return arrays, metrics

    def _aggregate(self, server_round: int, decoded: list[tuple], report: dict) -> dict:
        """The new global model from the valid updates under the chosen rule; notes of
        clients it cut back go to the log and the report."""
        weights = capped_weights([n for _, _, n in decoded], self.max_weight)
        for (node, _, n), w in zip(decoded, weights):
            if w < n:
                report["clipped"].append(
                    f"client {node}: weight {n} examples capped to {w} (fl.max_weight {self.max_weight:g})"
                )
        if self.aggregation == "fedavg":
            updates = [(state, w) for (_, state, _), w in zip(decoded, weights)]
            state = aggregate_state(updates, self.bits, self.rounding) if self.integer else _float_mean(updates)
        else:
            state, notes = robust_state(
                [(node, s, w) for (node, s, _), w in zip(decoded, weights)],
                self.global_state,
                self.aggregation,
                bits=self.bits,
                clip_norm=self.clip_norm,
                trim=self.trim,
            )
            report["clipped"] += notes
        for note in report["clipped"]:
            log.warning("round %d: %s", server_round, note)
        return state

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        good = []
        for msg in replies:
            if msg.has_error():
                continue
            try:
                self._decode(msg, EVALUATE_METRICS)
            except Exception as exc:
                log.warning(
                    "round %d: evaluation from client %d rejected: %s",
                    server_round + self.round_offset,
                    msg.metadata.src_node_id,
                    exc,
                )
                continue
            good.append(msg)
        return super().aggregate_evaluate(server_round + self.round_offset, good) if good else None


def _float_mean(updates) -> dict:
    """FedAvg of float tensors: the example-weighted mean in float64, back in each dtype
    (what Flower's aggregate_arrayrecords computes, on dsptrain's decoded state)."""
    total = sum(w for _, w in updates)
    first = updates[0][0]
    return {
        name: (sum(np.asarray(state[name], np.float64) * w for state, w in updates) / total).astype(
            np.asarray(first[name]).dtype
        )
        for name in first
    }
