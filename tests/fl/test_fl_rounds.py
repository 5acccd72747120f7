"""Federated rounds in one process (dsptrain.fl.simulate): Flower's FedAvg loop, real
Messages and ClientApps, with LeNet-5 + NITI clients; and each fault a phone can cause."""

import logging
import threading

import numpy as np
import pytest
from dsptrain import checkpoint
from dsptrain.fl import client as fl_client
from dsptrain.fl.server import CHECKPOINT_NAME
from dsptrain.fl.settings import load_fl_run
from dsptrain.fl.simulate import simulate
from flwr.app import Array
from flwr.clientapp import ClientApp

LENET_WEIGHTS = 6 * 25 + 16 * 6 * 25 + 400 * 120 + 120 * 84 + 84 * 10


def run(path, tmp_path, **kwargs):
    return simulate(load_fl_run(path), path, tmp_path / "out", **kwargs)


def wrapped(change):
    """A ClientApp that trains like dsptrain's and then changes its reply (`change(reply)`)."""
    app = ClientApp()

    @app.train()
    def train(msg, context):
        reply = fl_client.train(msg, context)
        change(reply)
        return reply

    return app


def test_three_clients_two_rounds_learn_above_chance(tmp_path, fl_config):
    path = fl_config(clients=3, rounds=2, local_steps=20)
    history = run(path, tmp_path)
    assert [h["round"] for h in history] == [0, 1, 2]
    assert history[0]["test_accuracy"] < 0.25  # the initial model is at chance (0.1)
    assert history[-1]["test_accuracy"] > 0.5, history[-1]
    assert all(h["accepted"] == 3 and not h["rejected"] and not h["failed"] for h in history[1:])
    # int8 on the wire: one byte per weight plus a few hundred bytes of framing
    assert LENET_WEIGHTS < history[-1]["upload_bytes_per_client"] < LENET_WEIGHTS + 2000
    state, meta = checkpoint.load(tmp_path / "out" / CHECKPOINT_NAME)
    assert meta["round"] == 2 and state["fc1.w"].q.dtype == np.int8


def test_a_crashing_client_leaves_the_round_to_the_others(tmp_path, fl_config, caplog):
    path = fl_config(clients=3, rounds=1, local_steps=5)

    def crash(reply):
        raise RuntimeError("phone 2 ran out of battery")

    with caplog.at_level(logging.WARNING, logger="dsptrain.fl"):
        history = run(path, tmp_path, apps={2: wrapped(crash)})
    last = history[-1]
    assert last["accepted"] == 2 and len(last["failed"]) == 1
    assert "phone 2 ran out of battery" in last["failed"][0]["reason"]
    assert "ran out of battery" in caplog.text
    assert last["test_accuracy"] > history[0]["test_accuracy"]


def test_a_client_past_the_deadline_is_left_out(tmp_path, fl_config):
    path = fl_config(clients=3, rounds=1, local_steps=5)
    release = threading.Event()
    hang = ClientApp()

    @hang.train()
    def train(msg, context):
        release.wait(60)  # bounded: the test releases it at the end
        return fl_client.train(msg, context)

    try:
        history = run(path, tmp_path, apps={0: hang}, client_timeout_s=8.0)
    finally:
        release.set()
    last = history[-1]
    assert last["accepted"] == 2 and last["missing"] == 1 and not last["failed"]


def test_too_few_valid_updates_keep_the_global_model(tmp_path, fl_config):
    path = fl_config(clients=3, rounds=1, local_steps=5, min_train_clients=3)

    def crash(reply):
        raise RuntimeError("lost")

    history = run(path, tmp_path, apps={1: wrapped(crash)})
    assert history[1]["accepted"] == 2
    assert history[1]["test_accuracy"] == history[0]["test_accuracy"]
    state, meta = checkpoint.load(tmp_path / "out" / CHECKPOINT_NAME)
    initial = load_fl_run(path)
    from dsptrain.train import Trainer

    fresh = Trainer(initial.run, progress=False)
    try:
        assert all(np.array_equal(state[k].q, fresh.state[k].q) and state[k].e == fresh.state[k].e for k in state)
    finally:
        fresh.close()


def test_bad_updates_are_rejected_with_reasons_and_never_aggregated(tmp_path, fl_config, caplog):
    path = fl_config(clients=5, rounds=1, local_steps=5, min_available_clients=5)

    def wrong_shape(reply):
        reply.content["arrays"]["fc3.w"] = Array(np.zeros((10, 83), np.int8))

    def far_exponent(reply):
        reply.content["arrays"]["fc2.w.exp"] = Array(np.array(7, np.int32))

    def nan_floats(reply):
        reply.content["arrays"]["fc1.w"] = Array(np.full((120, 400), np.nan, np.float32))

    with caplog.at_level(logging.WARNING, logger="dsptrain.fl"):
        history = run(path, tmp_path, apps={2: wrapped(wrong_shape), 3: wrapped(far_exponent), 4: wrapped(nan_floats)})
    last = history[-1]
    assert last["accepted"] == 2
    reasons = sorted(r["reason"] for r in last["rejected"])
    assert len(reasons) == 3
    assert any("fc3.w: shape (10, 83) is not the global model's (10, 84)" in r for r in reasons), reasons
    assert any("fc2.w: exponent 7 is more than 4 from" in r for r in reasons), reasons
    assert any("fc1.w: dtype float32 is not the global model's int8" in r for r in reasons), reasons
    assert caplog.text.count("rejected") >= 3
    # the global model is still int8 with its own exponents: nothing of the bad updates got in
    state, _ = checkpoint.load(tmp_path / "out" / CHECKPOINT_NAME)
    assert state["fc3.w"].q.shape == (10, 84) and state["fc1.w"].q.dtype == np.int8
    assert abs(state["fc2.w"].e) < 20
    assert last["test_accuracy"] > history[0]["test_accuracy"]


def test_fp32_runs_use_flowers_fedavg_and_reject_nan(tmp_path, fl_config, caplog):
    path = fl_config(recipe="fp32", clients=3, rounds=1, local_steps=3, test_limit=300)

    def nan_weights(reply):
        weights = reply.content["arrays"]["fc1.w"].numpy().copy()
        weights[0, :3] = np.nan
        reply.content["arrays"]["fc1.w"] = Array(weights)

    with caplog.at_level(logging.WARNING, logger="dsptrain.fl"):
        history = run(path, tmp_path, apps={1: wrapped(nan_weights)})
    last = history[-1]
    assert last["accepted"] == 2
    assert "fc1.w: 3 of 48000 values are NaN or infinite" in last["rejected"][0]["reason"]
    state, _ = checkpoint.load(tmp_path / "out" / CHECKPOINT_NAME)
    assert state["fc1.w"].dtype == np.float32 and np.isfinite(state["fc1.w"]).all()
    # float32 on the wire: four bytes per weight
    assert 4 * LENET_WEIGHTS < last["upload_bytes_per_client"] < 4 * LENET_WEIGHTS + 2000


@pytest.fixture(autouse=True)
def _close_sessions():
    yield
    fl_client.close_sessions()
