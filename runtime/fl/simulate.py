"""Flower's rounds in one process: a Grid that delivers each Message to a ClientApp directly.

For tests and benches on a small machine: the same ClientApp and ServerApp code as under
Flower's engines (real `Message`s, real `ClientApp.__call__` dispatch, Flower's FedAvg
loop in `Strategy.start`), without a SuperLink, SuperNodes or Ray. Clients run one after
another, each in a worker thread joined with a deadline: a client still busy at its
deadline gets no reply in that round, as a slow phone would not reach Flower's SuperLink
in time. A ClientApp that raises answers with an error Message, as Flower's do.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from flwr.app import Context, Error, Message, Metadata, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.run import Run, RunStatus
from flwr.supercore.task_identity import TaskIdentity

from .client import app as dsptrain_client_app
from .client import close_sessions
from .server import run_server
from .settings import FLRun

CLIENT_EXCEPTION = 1  # error code of a reply whose ClientApp raised
FIRST_NODE_ID = 1000  # node ids of the clients: FIRST_NODE_ID + partition id


def node_id(partition_id: int) -> int:
    return FIRST_NODE_ID + partition_id


class InProcessGrid(Grid):
    """The client holding partition p runs `apps[p]`, as node `node_id(p)`."""

    def __init__(
        self, apps: dict[int, ClientApp], run_config: dict, clients: int, client_timeout_s: float | None = None
    ):
        # Messages take their sender from the process's task identity, which Flower's
        # runtimes set; here this process is the server of run 1.
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SUPERLINK_NODE_ID, 0
        self.apps = {node_id(p): app for p, app in apps.items()}
        self.client_timeout_s = client_timeout_s
        self.contexts = {
            node_id(p): Context(
                run_id=1,
                node_id=node_id(p),
                state=RecordDict(),
                run_config=dict(run_config),
                node_config={"partition-id": p, "num-partitions": clients},
            )
            for p in apps
        }
        self._run = Run(
            run_id=1,
            fab_id="dsptrain",
            fab_version="",
            fab_hash="",
            override_config={},
            pending_at="",
            starting_at="",
            running_at="",
            finished_at="",
            status=RunStatus("", "", ""),
            flwr_aid="",
            federation_id="",
            primary_task_id=None,
            bytes_sent=0,
            bytes_recv=0,
            clientapp_runtime=0.0,
        )
        self._replies: dict[str, Message] = {}
        self.timed_out: list[int] = []  # node ids that missed their deadline, in order

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.apps)

    def _deliver(self, msg: Message) -> Message:
        metadata = msg.metadata
        sent = Message(
            metadata=Metadata(
                run_id=1,
                message_id=uuid.uuid4().hex,
                src_node_id=SUPERLINK_NODE_ID,
                dst_node_id=metadata.dst_node_id,
                reply_to_message_id="",
                group_id=metadata.group_id,
                created_at=time.time(),
                ttl=metadata.ttl,
                message_type=metadata.message_type,
            ),
            content=msg.content,
        )
        node = metadata.dst_node_id
        box: dict[str, Message] = {}

        def call():
            try:
                box["reply"] = self.apps[node](sent, self.contexts[node])
            except Exception as exc:  # the phone's app crashed: Flower answers with an error Message
                box["reply"] = Message(Error(CLIENT_EXCEPTION, f"{type(exc).__name__}: {exc}"), reply_to=sent)

        worker = threading.Thread(target=call, name=f"client-{node}", daemon=True)
        worker.start()
        worker.join(self.client_timeout_s)
        if worker.is_alive():
            self.timed_out.append(node)
            return None
        return box["reply"]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            reply = self._deliver(msg)
            key = uuid.uuid4().hex
            ids.append(key)
            if reply is not None:
                self._replies[key] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(key) for key in message_ids if key in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def simulate(
    flrun: FLRun,
    config_path: str | Path,
    out_dir: str | Path | None = None,
    apps: dict[int, ClientApp] | None = None,
    client_timeout_s: float | None = None,
) -> list[dict]:
    """Run `flrun` with fl.clients in-process clients; `apps` replaces some clients' ClientApp
    (partition id -> app; tests use it for crashing or misbehaving phones)."""
    clients = flrun.fl.clients
    nodes = {p: dsptrain_client_app for p in range(clients)}
    nodes.update(apps or {})
    run_config = {"config": str(config_path), "out-dir": str(out_dir or "")}
    grid = InProcessGrid(nodes, run_config, clients, client_timeout_s or flrun.fl.round_timeout_s)
    try:
        return run_server(grid, flrun, out_dir)
    finally:
        close_sessions()
