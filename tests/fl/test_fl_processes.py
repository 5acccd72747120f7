"""Separate processes: a server killed mid-run resumes from its last round; Flower's
deployment engine (a SuperLink and 3 SuperNodes on 127.0.0.1) trains above chance."""

import json
import signal
import subprocess
import sys
import time

from dsptrain.fl.deploy import LocalDeployment, _alive, _descendants
from dsptrain.fl.server import HISTORY_NAME
from dsptrain.fl.settings import load_fl_run
from dsptrain.fl.simulate import simulate


def rounds_written(path):
    try:
        return [h["round"] for h in json.loads(path.read_text())]
    except (OSError, ValueError):
        return []


def test_a_killed_server_resumes_after_its_last_round(tmp_path, fl_config):
    path = fl_config(clients=3, rounds=6, local_steps=5)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "dsptrain.cli", "fl", "simulate", str(path), "--out", str(out)]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and max(rounds_written(out / HISTORY_NAME), default=0) < 1:
            assert first.poll() is None, "the server ended before it could be killed"
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    killed_after = max(rounds_written(out / HISTORY_NAME))
    assert 1 <= killed_after < 6
    second = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"resuming after round {killed_after} of 6" in second.stderr
    assert rounds_written(out / HISTORY_NAME) == [0, 1, 2, 3, 4, 5, 6]
    history = json.loads((out / HISTORY_NAME).read_text())
    assert history[-1]["test_accuracy"] > 0.3


def test_deployment_engine_three_supernodes(tmp_path, fl_config):
    path = fl_config(clients=3, rounds=2, local_steps=20)
    out = tmp_path / "out"
    with LocalDeployment(3, tmp_path / "deploy") as deployment:
        started = [proc.pid for _, proc in deployment.processes]
        assert len(started) == 4  # a SuperLink and 3 SuperNodes
        done = deployment.run_app({"config": str(path), "out-dir": str(out)}, timeout_s=240)
        family = _descendants(started)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    history = json.loads((out / HISTORY_NAME).read_text())
    assert [h["round"] for h in history] == [0, 1, 2]
    assert all(h["accepted"] == 3 for h in history[1:])
    assert history[-1]["test_accuracy"] > 0.5, history[-1]
    # the same rounds in one process give the same global models: integer aggregation
    # does not depend on the order replies arrive, and every round starts afresh on a client
    alone = simulate(load_fl_run(path), path, tmp_path / "alone")
    assert [h["test_accuracy"] for h in alone] == [h["test_accuracy"] for h in history]
    # every process the deployment started, and those Flower started under them, is gone
    assert not [pid for pid in started + family if _alive(pid) and not _zombie(pid)]


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_local_deployment_binds_loopback_only(tmp_path):
    with LocalDeployment(0, tmp_path / "d") as deployment:
        config = (deployment.flwr_home / "config.toml").read_text()
        assert f'address = "127.0.0.1:{deployment.link_port}"' in config and "insecure = true" in config
        listening = _listening_addresses()
        assert f"127.0.0.1:{deployment.link_port}" in listening
        assert not [a for a in listening if a.endswith(f":{deployment.link_port}") and not a.startswith("127.0.0.1")]


def _listening_addresses():
    """host:port of every listening IPv4 TCP socket (/proc/net/tcp)."""
    found = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                host, port = local.split(":")
                ip = ".".join(str(int(host[i : i + 2], 16)) for i in (6, 4, 2, 0))
                found.append(f"{ip}:{int(port, 16)}")
    return found
