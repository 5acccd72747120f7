"""Hostile federated replies and rounds: every malformed reply rejected by name, every
valid-but-poisoned one cut back and named by the robust rules, no round crashes the
server, and a poisoned client moves the global accuracy no more than honest ones do."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import yaml
from dsptrain.fl import client as fl_client
from dsptrain.fl.records import from_record
from dsptrain.fl.settings import load_fl_run
from dsptrain.fl.simulate import simulate
from dsptrain.fl.strategy import IntegerFedAvg
from dsptrain.numerics import QTensor
from flwr.app import Array
from flwr.clientapp import ClientApp

from .gen_fl import Reply, global_state, honest_update, hostile_replies

MIN_REPLIES = 100
HONEST = 4
RULES = ("fedavg", "clip", "trimmed_mean", "median")


def _strategy(state, integer, rule):
    return IntegerFedAvg(
        state,
        integer=integer,
        aggregation=rule,
        max_examples=50_000,
        max_weight=0.5,
        min_train_nodes=2,
        min_available_nodes=2,
    )


def _round(case, rule, seed):
    """(strategy, report, new global state or None, honest updates, global before)."""
    gen, rng = np.random.default_rng(seed), random.Random(seed)
    state = global_state(case.integer, seed)
    honest = [honest_update(state, gen) for _ in range(HONEST)]
    replies = [Reply.of(u, 400 + 50 * i).build(node=i + 1) for i, u in enumerate(honest)]
    hostile = Reply.of(honest_update(state, gen))
    case.change(hostile, rng)
    replies.insert(rng.randrange(len(replies) + 1), hostile.build(node=99))
    strategy = _strategy(state, case.integer, rule)
    arrays, _ = strategy.aggregate_train(1, replies)
    new = from_record(arrays, "global") if arrays is not None else None
    return strategy.reports[1], new, honest, state


def _values(t):
    return t.q.astype(np.float64) * 2.0**t.e if isinstance(t, QTensor) else np.asarray(t, np.float64)


def _slack(t):
    return 2.0**t.e if isinstance(t, QTensor) else 1e-5


def _poison_problem(rule, report, new, honest, before) -> str | None:
    if new is None:
        return "no aggregate"
    if rule != "fedavg" and not any("client 99" in note for note in report["clipped"]):
        return f"client 99 not named among {report['clipped']}"
    if rule in ("trimmed_mean", "median"):
        for name, value in new.items():
            stack = np.stack([_values(u[name]) for u in honest])
            low, high = stack.min(0) - _slack(value), stack.max(0) + _slack(value)
            got = _values(value)
            if np.any(got < low) or np.any(got > high):
                return f"{name} left the honest clients' range"
    if rule == "clip":
        norm = lambda s: np.sqrt(sum(np.sum((_values(s[n]) - _values(before[n])) ** 2) for n in before))  # noqa: E731
        slack = np.sqrt(sum(_slack(before[n]) ** 2 * np.size(_values(before[n])) for n in before))
        if norm(new) > max(norm(u) for u in honest) + slack:
            return f"moved {norm(new):.3g}, more than any honest update ({max(norm(u) for u in honest):.3g})"
    return None


def test_hostile_replies_are_rejected_or_cut_back_by_name(caplog):
    cases = hostile_replies()
    assert len(cases) >= MIN_REPLIES, f"the generator made only {len(cases)} cases"
    failures, rounds = [], 0
    with caplog.at_level(logging.WARNING, logger="dsptrain.fl"):
        for index, case in enumerate(cases):
            for rule in RULES:
                rounds += 1
                label = f"{case.label} ({'int8' if case.integer else 'fp32'}, {rule})"
                try:
                    report, new, honest, before = _round(case, rule, seed=index)
                except Exception as exc:  # noqa: BLE001 -- a crashed round is what we look for
                    failures.append(f"{label}: the round raised {type(exc).__name__}: {exc}")
                    continue
                rejected = {r["node"]: r["reason"] for r in report["rejected"]}
                if case.kind == "reject":
                    if 99 not in rejected or case.needle not in rejected[99]:
                        failures.append(f"{label}: not rejected naming {case.needle!r}: {rejected.get(99)}")
                elif case.kind == "failed":
                    if [f["node"] for f in report["failed"]] != [99]:
                        failures.append(f"{label}: not logged as failed: {report['failed']}")
                elif why := _poison_problem(rule, report, new, honest, before):
                    failures.append(f"{label}: {why}")
                if len(report["accepted"]) < HONEST or new is None:
                    failures.append(f"{label}: honest updates lost ({report['accepted']})")
                elif any(not np.all(np.isfinite(_values(v))) for v in new.values()):
                    failures.append(f"{label}: the global model is not finite")
    assert rounds >= MIN_REPLIES
    assert not failures, f"{len(failures)} of {rounds} rounds failed:\n" + "\n".join(failures[:20])
    assert "client 99" in caplog.text


def test_a_run_of_rounds_with_random_hostile_clients_never_crashes():
    """Twenty rounds in a row, each with one to three hostile replies drawn from the
    generator, the global model carried from round to round."""
    rng, gen = random.Random(41), np.random.default_rng(41)
    for integer in (True, False):
        cases = [c for c in hostile_replies() if c.integer == integer]
        state = global_state(integer)
        strategy = _strategy(state, integer, "trimmed_mean")
        for number in range(1, 21):
            replies = [Reply.of(honest_update(strategy.global_state, gen)).build(node=i + 1) for i in range(HONEST)]
            for j in range(rng.randint(1, 3)):
                hostile = Reply.of(honest_update(strategy.global_state, gen))
                rng.choice(cases).change(hostile, rng)
                replies.append(hostile.build(node=90 + j))
            arrays, _ = strategy.aggregate_train(number, replies)
            assert arrays is not None, strategy.reports[number]
            assert sorted(strategy.reports[number]["accepted"])[:HONEST] == [1, 2, 3, 4]
        for name, value in strategy.global_state.items():
            assert np.all(np.isfinite(_values(value))), name
            if isinstance(value, QTensor):
                assert value.e == state[name].e, f"{name}: the exponent moved from {state[name].e} to {value.e}"


# ---------------------------------------------------------------- real rounds, real accuracy


def _poisoning_app(kind):
    app = ClientApp()

    @app.train()
    def train(msg, context):
        reply = fl_client.train(msg, context)
        arrays = reply.content["arrays"]
        for key in list(arrays.keys()):
            if key.endswith(".w"):
                value = arrays[key].numpy()
                if kind == "int8":
                    arrays[key] = Array(np.full_like(value, 127))
                    arrays[key + ".exp"] = Array(np.array(arrays[key + ".exp"].numpy() + 4, np.int32))
                else:
                    arrays[key] = Array(np.full_like(value, 3e38))
        return reply

    return app


def _accuracy(tmp_path, name, recipe, rule, apps=None, seed=0):
    config = {
        "name": name,
        "recipe": recipe,
        "model": {"name": "lenet5"},
        "data": {"dataset": "fashion-mnist", "train_limit": 2000, "test_limit": 500},
        "train": {"batch_size": 32, "seed": seed},
        "backend": "auto",
        "energy": "estimate",
        "fl": {
            "clients": 6,
            "rounds": 2,
            "local_steps": 12,
            "min_train_clients": 2,
            "min_available_clients": 6,
            "aggregation": rule,
            "partition": {"kind": "iid", "seed": seed},
            **({"trim": 0.2} if rule == "trimmed_mean" else {}),
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        history = simulate(load_fl_run(path), path, tmp_path / name, apps=apps)
    finally:
        fl_client.close_sessions()
    return history[-1]["test_accuracy"], history


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # FedAvg's poisoned model: inf logits
@pytest.mark.parametrize("recipe, kind, rule", [("niti", "int8", "median"), ("fp32", "fp32", "trimmed_mean")])
def test_a_poisoned_client_moves_accuracy_no_more_than_honest_spread(tmp_path, recipe, kind, rule):
    honest = [_accuracy(tmp_path, f"honest{seed}", recipe, rule, seed=seed)[0] for seed in (0, 1)]
    poisoned, history = _accuracy(tmp_path, "poisoned", recipe, rule, apps={3: _poisoning_app(kind)})
    spread = max(honest) - min(honest)
    assert any("client" in note for note in history[-1]["clipped"]), history[-1]
    assert poisoned >= min(honest) - max(spread, 0.02), (poisoned, honest)
    plain, _ = _accuracy(tmp_path, "plain", recipe, "fedavg", apps={3: _poisoning_app(kind)})
    assert plain < min(honest) - 0.1, f"FedAvg was not hurt ({plain} vs {honest}): the poison tests nothing"
    print(f"{recipe} {rule}: honest {honest}, poisoned {poisoned}, poisoned under fedavg {plain}")


@pytest.mark.parametrize(
    "fl, needle",
    [
        ({"aggregation": "krum"}, "fl.aggregation"),
        ({"trim": 0.5, "aggregation": "trimmed_mean"}, "fl.trim"),
        ({"trim": 0.1}, "fl.trim: 0.1 is read only with fl.aggregation: trimmed_mean"),
        ({"clip_norm": 2.0}, "fl.clip_norm: 2.0 is read only with fl.aggregation: clip"),
        ({"max_weight": 0.0}, "fl.max_weight"),
        ({"max_examples": -1}, "fl.max_examples"),
    ],
)
def test_robust_settings_are_checked_by_name(tmp_path, fl, needle):
    from dsptrain.errors import ConfigError

    config = {
        "name": "x",
        "recipe": "niti",
        "model": {"name": "lenet5"},
        "data": {"dataset": "synthetic"},
        "fl": {"clients": 3, "rounds": 1, **fl},
    }
    path = tmp_path / "fl.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_fl_run(path)
