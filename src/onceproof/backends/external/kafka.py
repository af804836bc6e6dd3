"""``ExternalCluster``: the :class:`~onceproof.backends.base.Cluster` protocol over a Kafka cluster onceproof
did not start and must not own (``--backend external``, issue 28, design §1.2 and §4.2).

* Nothing is installed, started or stopped on its own account: :meth:`up` only checks that the brokers
  answer, :meth:`down` only undoes the faults still pending (``ledger``), :meth:`clean` deletes nothing.
* Faults are the user's commands (``[faults.kill-broker]`` etc., ``fault_map``), run through
  ``commands.CommandRunner``; the heal is recorded before the fault runs, so it outlives a killed harness.
* A node's state comes from the wire, not from a process table: a broker that answers a metadata request
  sent to it alone (a fresh client whose only bootstrap is that broker, with the cluster's security
  settings) is ``running``. One that does not answer is ``stopped`` when onceproof paused it (a paused
  process still holds its socket open, so the wire cannot tell a pause from a death), else ``gone``.
  ``kill`` therefore counts as effective only when the broker stopped answering after the command, the
  evidence ``nemesis/broker.py`` reads (``status_after == "gone"``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from onceproof.backends.base import GONE, STOPPED, ClusterError, NodeState
from onceproof.backends.common.health import wait_healthy
from onceproof.backends.external.cluster_file import ClusterFile
from onceproof.backends.external.commands import CommandRunner
from onceproof.backends.external.fault_map import Command, FaultMapError
from onceproof.backends.external.ledger import PendingHeals
from onceproof.backends.ssh.remote import Completed
from onceproof.kafka_config import client_config

RUNNING = "running"
PROBE_S = 2.0
"""How long a broker has to answer a metadata request before it counts as not answering, seconds."""
GONE_WITHIN_S = 15.0
"""How long after a kill command a broker may still answer (a container's stop), seconds."""


def answers(address: str, timeout_s: float = PROBE_S) -> bool:
    """Whether the broker at ``address`` (``host:port``) answers a metadata request sent to it alone,
    within ``timeout_s`` seconds (a fresh librdkafka client: it knows no other broker yet)."""
    admin = AdminClient(client_config(address, {"socket.timeout.ms": int(timeout_s * 1000),
                                                "socket.connection.setup.timeout.ms": int(timeout_s * 1000)},
                                      logger=logging.getLogger("onceproof.librdkafka.probe")))
    try:
        admin.list_topics(timeout=timeout_s)
        return True
    except Exception:  # noqa: BLE001 - KafkaException(_TRANSPORT / _TIMED_OUT): no answer
        return False


class ExternalCluster:
    """A cluster described by ``cluster.toml``; the run directory holds its ledger.

    Args:
        cf: the parsed cluster file.
        run_dir: the run's directory (``faults-pending.json``, ``logs/``).
        runner: runs the fault map's commands (the backend builds it with the SSH targets and the secrets).
        run_id: the run's id (``{run_id}``, ``{prefix}`` in templates).
    """

    def __init__(self, cf: ClusterFile, run_dir: Path, runner: CommandRunner, run_id: str) -> None:
        self.cf = cf
        self.run_dir = Path(run_dir)
        self.runner = runner
        self.run_id = run_id
        self.ledger = PendingHeals(self.run_dir)
        self._addresses: dict[int, str] = {}
        self._paused: dict[int, str | None] = {}  # node -> its ledger token
        self._down: dict[int, tuple[str, str | None]] = {}  # node -> (the key that took it down, its token)
        self.commands: list[dict] = []
        """Every command run, with its outcome (``{"key", "node", "argv", "returncode", "seconds",
        "stderr"}``; stderr scrubbed and cut to its last 500 characters): the faults' evidence."""

    # ------------------------------------------------------------------ what the cluster is
    @property
    def nodes(self) -> list[int]:
        """The brokers' ids: Kafka's metadata at :meth:`up` (``[kafka.brokers]`` before)."""
        return sorted(self._addresses or self.cf.kafka.brokers)

    @property
    def bootstrap(self) -> str:
        """``[kafka] bootstrap``."""
        return self.cf.kafka.bootstrap

    @property
    def version(self) -> str:
        """Not known from outside (Kafka's protocol does not report a broker's release)."""
        return "external"

    @property
    def log_dir(self) -> Path:
        """``<run>/logs``: onceproof collects no broker log from a cluster it does not own."""
        return self.run_dir / "logs"

    @property
    def state_file(self) -> Path:
        """Where the ledger lives: a cluster onceproof does not own has no other state of its."""
        return self.ledger.path

    def address(self, node: int) -> str:
        """``host:port`` that Kafka's metadata advertises for ``node`` at the harness's listener.

        Raises: :class:`ClusterError` before :meth:`up` or for an unknown node."""
        try:
            return self._addresses[node]
        except KeyError:
            raise ClusterError(f"broker {node}: not in the metadata read at start "
                               f"({sorted(self._addresses)})") from None

    def log_files(self) -> list[Path]:
        """None: the brokers' logs stay on the cluster."""
        return []

    # ------------------------------------------------------------------ lifecycle
    def up(self, timeout_s: float = 120.0) -> None:
        """Check (never start) that every broker answers: the metadata lists the brokers of
        ``[kafka.brokers]`` (when given) and a controller, and each answers on its own.

        Raises: :class:`ClusterError` naming the bootstrap and what was missing."""
        admin = AdminClient(client_config(self.bootstrap, {"socket.timeout.ms": 5000},
                                          logger=logging.getLogger("onceproof.librdkafka.admin")))
        try:
            md = admin.list_topics(timeout=min(timeout_s, 30.0))
        except Exception as e:  # noqa: BLE001 - KafkaException: the cluster is not reachable
            raise ClusterError(f"no answer from {self.bootstrap} ({e}); start the cluster, or fix [kafka] bootstrap "
                               f"and [kafka.security] in {self.cf.path}") from None
        self._addresses = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
        if self.cf.kafka.brokers and set(self.cf.kafka.brokers) != set(self._addresses):
            raise ClusterError(f"{self.cf.path}: [kafka.brokers] lists {sorted(self.cf.kafka.brokers)}, the cluster's "
                               f"metadata {sorted(self._addresses)}; make them agree (a broker down before the run?)")
        self.healthy(timeout_s)

    def healthy(self, timeout_s: float = 120.0) -> None:
        """Block until every broker is in the metadata and answers on its own. Raises :class:`ClusterError`."""
        wait_healthy(self.bootstrap, len(self.nodes), exited=lambda: None,
                     not_listening=lambda: [n for n in self.nodes if not answers(self.address(n))],
                     timeout_s=timeout_s, where=f"the cluster of {self.cf.path}")

    def down(self, graceful: bool = False) -> list[tuple[int, int]]:
        """Undo every fault still pending (newest first), leave the cluster running. Returns ``[]`` (no
        process of the cluster is onceproof's). A heal that fails stays in the ledger for ``onceproof heal``."""
        self.ledger.drain(self.runner.run)
        self._paused.clear()
        self._down.clear()
        return []

    def clean(self) -> None:
        """Nothing: the brokers' data is the user's."""

    # ------------------------------------------------------------------ faults
    def _values(self, key: str, node: int) -> dict[str, object]:
        host, _, port = self.address(node).rpartition(":") if node in self._addresses else ("", "", "")
        info = self.cf.kafka.brokers.get(node, {})
        return self.cf.faults.values(key, {"run_id": self.run_id, "prefix": self.cf.run_prefix(self.run_id),
                                           "broker_id": node, "host": info.get("host", host), "port": port},
                                     broker=info)

    def _run(self, key: str, node: int, cmd: Command) -> Completed:
        """Run ``cmd`` and record it in :attr:`commands` under ``key``."""
        done = self.runner.run(cmd)
        self.commands.append({"key": key, "node": node, "argv": list(done.argv), "returncode": done.returncode,
                              "seconds": round(done.seconds, 2), "stderr": done.stderr.strip()[-500:]})
        return done

    def _do(self, key: str, node: int, *, heal_key: str | None = None) -> str | None:
        """Run ``key``'s command for ``node``; with ``heal_key``, record its heal in the ledger first.
        Returns the ledger token (None without a heal). Raises: :class:`ClusterError` when it exits ≠ 0."""
        values = self._values(key, node)
        token = None
        heal = self.cf.faults.heal(heal_key, values) if heal_key else None
        if heal is not None:
            token = self.ledger.add(f"{key}:{node}", heal)
        done = self._run(key, node, self.cf.faults.run(key, values))
        if done.returncode != 0:
            if token is not None:
                self.ledger.settle(token)
            raise ClusterError(f"[faults.{key}] for broker {node} exited {done.returncode}: "
                               f"{done.stderr.strip()[-300:]}")
        return token

    def _heal(self, key: str, node: int, token: str | None) -> None:
        heal = self.cf.faults.heal(key, self._values(key, node))
        if heal is None:
            return
        done = self._run(f"{key}.heal", node, heal)
        if done.returncode != 0:
            raise ClusterError(f"[faults.{key}] heal for broker {node} exited {done.returncode}: "
                               f"{done.stderr.strip()[-300:]}; it stays in {self.ledger.path}")
        if token is not None:
            self.ledger.settle(token)

    def kill(self, node: int) -> NodeState:
        """Run ``[faults.kill-broker]`` for ``node`` (its heal recorded first), then wait ≤
        :data:`GONE_WITHIN_S` s for the broker to stop answering. Returns ``NodeState(None, "gone")`` when it
        did, ``"running"`` when it still answers (the fault was not effective)."""
        self._down[node] = ("kill-broker", self._do("kill-broker", node, heal_key="kill-broker"))
        deadline = time.monotonic() + GONE_WITHIN_S
        while answers(self.address(node)):
            if time.monotonic() > deadline:
                return NodeState(None, RUNNING)
            time.sleep(0.2)
        return NodeState(None, GONE)

    def start(self, node: int) -> None:
        """Run the heal of the fault that took ``node`` down (``[faults.kill-broker]``'s by default, which
        starts it; a map entry without a heal runs nothing: a cluster that restarts its brokers itself).

        Raises: :class:`ClusterError` when the heal exits ≠ 0 (it stays in the ledger) or the map has no
        ``kill-broker``."""
        key, token = self._down.pop(node, ("kill-broker", None))
        try:
            self._heal(key, node, token)
        except FaultMapError as e:
            raise ClusterError(str(e)) from None

    def stop(self, node: int, clean: bool = True, grace_s: float = 15.0) -> None:
        """``clean``: ``[faults.bounce-broker]`` (the user's clean stop, e.g. ``systemctl stop``); else :meth:`kill`."""
        if not clean:
            self.kill(node)
            return
        self._down[node] = ("bounce-broker", self._do("bounce-broker", node, heal_key="bounce-broker"))

    def pause(self, node: int) -> None:
        """Run ``[faults.pause-broker]`` for ``node`` (its heal recorded first)."""
        self._paused[node] = self._do("pause-broker", node, heal_key="pause-broker")

    def resume(self, node: int) -> None:
        """Run ``[faults.pause-broker]``'s heal for ``node``."""
        self._heal("pause-broker", node, self._paused.pop(node, None))

    def state(self, node: int) -> NodeState:
        """``running`` when ``node`` answers on its own; else ``stopped`` if onceproof paused it, ``gone``
        otherwise (see the module docstring). ``pid`` is always ``None``."""
        if answers(self.address(node)):
            return NodeState(None, RUNNING)
        return NodeState(None, STOPPED if node in self._paused else GONE)
