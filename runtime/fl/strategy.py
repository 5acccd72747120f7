"""FedAvg with exact integer aggregation, update validation and a resumable round count.

A subclass of Flower's FedAvg (flwr.serverapp.strategy.FedAvg). What it changes:

- every reply is checked (validate.py) before anything is averaged: a failed client,
  a malformed or out-of-range update is logged with its reason and left out;
- fewer valid updates than `min_train_nodes` leave the global model unchanged for that
  round (the minimum is honoured on what arrives, not only on what is sampled);
- integer weights are averaged exactly (aggregate.py); float weights go through
  FedAvg's own aggregation untouched;
- `round_offset` lets a restarted server number its rounds from its checkpoint;
- waiting for clients to connect is bounded by `connect_timeout_s` (Flower's sampler
  waits forever).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from ..errors import UserError
from .aggregate import aggregate_state
from .records import from_record, to_record
from .validate import UpdateError, check_update

log = logging.getLogger("dsptrain.fl")


class IntegerFedAvg(FedAvg):
    def __init__(self, global_state: dict, *, integer: bool, bits: int = 8, rounding: str = "round",
                 max_exponent_shift: int = 4, round_offset: int = 0, connect_timeout_s: float = 600.0, **fedavg):
        super().__init__(**fedavg)
        self.global_state = dict(global_state)
        self.integer, self.bits, self.rounding = integer, bits, rounding
        self.max_exponent_shift = max_exponent_shift
        self.round_offset = round_offset
        self.connect_timeout_s = connect_timeout_s
        self.reports: dict[int, dict] = {}   # per round: accepted, rejected and failed clients
        self.sampled: dict[int, int] = {}    # per round: clients asked to train

    # ------------------------------------------------------------ sampling
    def _wait_for_nodes(self, grid: Grid) -> None:
        deadline = time.monotonic() + self.connect_timeout_s
        want = max(self.min_available_nodes, self.min_train_nodes)
        while (have := len(list(grid.get_node_ids()))) < want:
            if time.monotonic() > deadline:
                raise UserError(f"only {have} of the {want} clients needed connected within "
                                f"{self.connect_timeout_s:g} s (fl.round_timeout_s)")
            time.sleep(0.5)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self._wait_for_nodes(grid)
        messages = list(super().configure_train(server_round + self.round_offset, arrays, config, grid))
        self.sampled[server_round + self.round_offset] = len(messages)
        return messages

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if self.fraction_evaluate == 0.0:
            return []
        self._wait_for_nodes(grid)
        return super().configure_evaluate(server_round + self.round_offset, arrays, config, grid)

    # ------------------------------------------------------------ aggregation
    def screen(self, server_round: int, replies: Iterable[Message]) -> tuple[list[Message], list[dict], dict]:
        """(valid replies, their decoded (state, examples), the round's report); logs every exclusion."""
        report = {"accepted": [], "rejected": [], "failed": [], "clients": []}
        valid, decoded = [], []
        for msg in replies:
            node = msg.metadata.src_node_id
            if msg.has_error():
                report["failed"].append({"node": node, "reason": msg.error.reason})
                log.warning("round %d: client %d failed: %s", server_round, node, msg.error.reason)
                continue
            try:
                state, examples, metrics = self._decode(msg)
                check_update(state, examples, self.global_state, self.bits, self.max_exponent_shift)
            except UpdateError as exc:
                report["rejected"].append({"node": node, "reason": str(exc)})
                log.warning("round %d: update from client %d rejected: %s", server_round, node, exc)
                continue
            report["accepted"].append(node)
            report["clients"].append(dict(metrics))
            valid.append(msg)
            decoded.append((state, int(examples)))
        return valid, decoded, report

    def _decode(self, msg: Message) -> tuple[dict, float, MetricRecord]:
        content = msg.content
        if len(content.array_records) != 1 or len(content.metric_records) != 1:
            raise UpdateError(f"expected one ArrayRecord and one MetricRecord, got {len(content.array_records)} "
                              f"and {len(content.metric_records)}")
        metrics = next(iter(content.metric_records.values()))
        if self.weighted_by_key not in metrics:
            raise UpdateError(f"metrics lack {self.weighted_by_key!r}")
        arrays = next(iter(content.array_records.values()))
        return from_record(arrays, "update"), metrics[self.weighted_by_key], metrics

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        server_round += self.round_offset
        replies = list(replies)
        valid, decoded, report = self.screen(server_round, replies)
        # a client that never answered (timed out, or its node vanished) is only missing
        report["missing"] = max(0, self.sampled.get(server_round, len(replies)) - len(replies))
        if report["missing"]:
            log.warning("round %d: %d of %d sampled clients did not reply in time", server_round,
                        report["missing"], self.sampled[server_round])
        self.reports[server_round] = report
        if len(valid) < self.min_train_nodes:
            log.warning("round %d: %d valid updates, fewer than the minimum %d: the global model is unchanged",
                        server_round, len(valid), self.min_train_nodes)
            return None, None
        if self.integer:
            arrays = to_record(aggregate_state(decoded, self.bits, self.rounding), list(self.global_state))
            metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        else:
            arrays, metrics = super().aggregate_train(server_round, valid)
        if arrays is not None:
            self.global_state = from_record(arrays, "global model")
        return arrays, metrics

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        replies = [m for m in replies if not m.has_error()]
        return super().aggregate_evaluate(server_round + self.round_offset, replies) if replies else None
