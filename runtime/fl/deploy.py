"""Flower's deployment engine on one machine: a SuperLink, N SuperNodes, `flwr run`.

Each is a separate process, as on a real deployment, but bound to 127.0.0.1 only and in
insecure mode (no TLS: loopback traffic never leaves the machine). SuperNode i holds
partition i (`--node-config "partition-id=i num-partitions=N"`). `flwr run` submits the
app declared in pyproject.toml ([tool.flwr.app]) to the SuperLink through a connection
written to a private FLWR_HOME, so the user's ~/.flwr is neither read nor changed.
Every wait is bounded; on return (or an exception) every process started here is
stopped, by its own id.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import CONFIG_ROOT
from ..errors import UserError

LOOPBACK = "127.0.0.1"
PROJECT_DIR = CONFIG_ROOT.parent  # the checkout whose pyproject.toml declares the Flower app


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _tool(name: str) -> str:
    """A Flower command from this interpreter's environment (else PATH)."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        raise UserError(f"{name} not found beside {sys.executable} or on PATH: install flwr (pip install flwr)")
    return found


def _wait_port(port: int, deadline: float, proc: subprocess.Popen, what: str, log: Path) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(
                f"{what} exited with status {proc.returncode} before listening on {LOOPBACK}:{port}; its log: {log}"
            )
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.2)
    raise UserError(f"{what} did not listen on {LOOPBACK}:{port} in time; its log: {log}")


@dataclass
class LocalDeployment:
    """A SuperLink and `nodes` SuperNodes on 127.0.0.1; use as a context manager."""

    nodes: int
    work_dir: Path
    startup_timeout_s: float = 60.0
    processes: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    link_port: int = 0

    def __enter__(self) -> LocalDeployment:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.flwr_home = self.work_dir / "flwr-home"
        self.flwr_home.mkdir(exist_ok=True)
        self.link_port = free_port()
        (self.flwr_home / "config.toml").write_text(
            '[superlink]\ndefault = "dsptrain-local"\n\n'
            f'[superlink.dsptrain-local]\naddress = "{LOOPBACK}:{self.link_port}"\ninsecure = true\n'
        )
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self) -> dict:
        env = dict(os.environ, FLWR_HOME=str(self.flwr_home))
        env["FLWR_DISABLE_UPDATE_CHECK"] = "1"
        # the SuperLink and SuperNodes start Flower's helpers (flower-superexec) by name
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return env

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.work_dir / f"{name}.log", "wb")
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=self.work_dir, start_new_session=True
        )
        log.close()
        self.processes.append((name, proc))
        return proc

    def _start(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        link = self._spawn(
            "superlink",
            [
                _tool("flower-superlink"),
                "--insecure",
                "--host",
                LOOPBACK,
                "--port",
                str(self.link_port),
                "--disable-runtime-dependency-installation",
            ],
        )
        _wait_port(self.link_port, deadline, link, "flower-superlink", self.work_dir / "superlink.log")
        for i in range(self.nodes):
            port = free_port()
            node = self._spawn(
                f"supernode-{i}",
                [
                    _tool("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    f"{LOOPBACK}:{self.link_port}",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(port),
                    "--max-wait-time",
                    str(int(self.startup_timeout_s)),
                    "--node-config",
                    f"partition-id={i} num-partitions={self.nodes}",
                ],
            )
            _wait_port(port, deadline, node, f"flower-supernode {i}", self.work_dir / f"supernode-{i}.log")

    def run_app(self, run_config: dict, timeout_s: float, app_dir: Path = PROJECT_DIR) -> subprocess.CompletedProcess:
        """`flwr run APP dsptrain-local --stream`, bounded by `timeout_s`."""
        pairs = " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in run_config.items())
        argv = [_tool("flwr"), "run", str(app_dir), "dsptrain-local", "--stream", "--run-config", pairs]
        try:
            return subprocess.run(
                argv, env=self.env(), cwd=self.work_dir, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise UserError(f"flwr run did not finish within {timeout_s:g} s; logs in {self.work_dir}") from None

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM to each process started here and to their descendants (Flower starts its
        SuperExec and app processes detached, in sessions of their own), SIGKILL after `grace_s`."""
        pids = [proc.pid for _, proc in self.processes]
        family = _descendants(pids)
        for _, proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for pid in family:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, proc in self.processes:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        while family and time.monotonic() < deadline:
            family = [pid for pid in family if _alive(pid)]
            time.sleep(0.1)
        for pid in family:
            _signal(pid, signal.SIGKILL)
        self.processes.clear()


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parents


def _descendants(roots: list[int]) -> list[int]:
    parents = _parents()
    found, frontier = [], set(roots)
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found.extend(children)
        frontier = children
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def deploy(config_path: Path, nodes: int, out_dir: Path, timeout_s: float, work_dir: Path | None = None) -> Path:
    """Run a federated config on a local deployment; returns the output directory."""
    work = Path(work_dir or tempfile.mkdtemp(prefix="dsptrain-fl-"))
    with LocalDeployment(nodes, work) as deployment:
        done = deployment.run_app(
            {"config": str(Path(config_path).resolve()), "out-dir": str(Path(out_dir).resolve())}, timeout_s
        )
    if done.returncode != 0:
        raise UserError(f"flwr run failed with status {done.returncode}: {done.stderr.strip()[-400:]} (logs in {work})")
    return Path(out_dir)
