"""``rolling-upgrade`` (nemesis/rolling_upgrade.py) against a stand-in cluster: the order, the stop-restart
on the new release per broker, the finalize, and the outcomes. The real roll (3.5.2 → the pin, on a local
cluster under the eos sink) is ``make test-oldest``'s run. ``kafka-features describe`` parsing
(clients/features.py) on the tool's real output shape."""

from __future__ import annotations

import random
import threading

import pytest

from onceproof.backends.base import GONE, BrokerVersions, NodeState
from onceproof.clients import features
from onceproof.nemesis import broker_log, catalog, rolling_upgrade
from onceproof.nemesis import operator as op
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext
from onceproof.nemesis.rolling_upgrade import RollingUpgrade

DESCRIBE_41 = (
    "Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
    "FinalizedVersionLevel: 0\tEpoch: 40\n"
    "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.1-IV1\t"
    "FinalizedVersionLevel: 4.1-IV1\tEpoch: 40\n"
    "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 0\t"
    "Epoch: 40\n")


def test_describe_gives_each_finalized_level():
    assert features.parse_describe(DESCRIBE_41) == {"eligible.leader.replicas.version": "0",
                                                    "metadata.version": "4.1-IV1", "transaction.version": "0"}
    assert features.parse_describe("Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\t"
                                   "SupportedMaxVersion: 3.5-IV2\tFinalizedVersionLevel: 3.5-IV2\tEpoch: 5") == \
        {"metadata.version": "3.5-IV2"}
    assert features.parse_describe("") == {}


class Cluster:
    """Three brokers whose start logs the release each was given (what ``Kafka version:`` shows)."""

    bootstrap = "127.0.0.1:1"
    nodes = [1, 2, 3]

    def __init__(self, start: str = "3.5.2", refuse: int | None = None):
        self.versions = dict.fromkeys(self.nodes, start)
        self.alive = dict.fromkeys(self.nodes, True)
        self.logs = dict.fromkeys(self.nodes, "")
        self.events: list[tuple] = []
        self.refuse = refuse

    def version_of(self, node):
        return self.versions[node]

    def set_version(self, node, version):
        from onceproof.backends.base import ClusterError
        if node == self.refuse:
            raise ClusterError("Maven could not resolve kafka")
        self.events.append(("set", node, version))
        self.versions[node] = version

    def stop(self, node, clean=True, grace_s=0):
        self.events.append(("stop", node))
        self.alive[node] = False
        self.logs[node] += "Terminating process due to signal SIGTERM\n"

    def start(self, node):
        self.events.append(("start", node, self.versions[node]))
        self.alive[node] = True
        self.logs[node] += f"INFO Kafka version: {self.versions[node]} (AppInfoParser)\n"

    def state(self, node):
        return NodeState(node, "running" if self.alive[node] else GONE)


@pytest.fixture
def wired(monkeypatch):
    """The stand-in's logs and metadata in place of the real cluster's; the finalize recorded."""
    calls = []
    monkeypatch.setattr(broker_log, "size", lambda c, n: len(c.logs[n]))
    monkeypatch.setattr(broker_log, "read_since", lambda c, n, since: c.logs[n][since:])
    monkeypatch.setattr(op, "restart", lambda ctx, nodes, t: {n: (ctx.cluster.start(n), 1.0)[1] for n in nodes})
    monkeypatch.setattr(op, "_out_of_sync", lambda b, n: [])
    monkeypatch.setattr(rolling_upgrade, "_live", lambda ctx: [n for n in ctx.cluster.nodes if ctx.cluster.alive[n]])
    mv = {"now": "3.5-IV2"}

    def finalize(bootstrap, release, tools):
        calls.append((release, tools))
        mv["now"] = ".".join(release.split(".")[:2]) + "-IV1"
        return "metadata.version was upgraded to 27."
    monkeypatch.setattr(features, "finalize", finalize)
    monkeypatch.setattr(features, "describe", lambda b, tools="": {"metadata.version": mv["now"]})
    return calls


def ctx_of(cluster) -> NemesisContext:
    return NemesisContext(spark=None, control=None, checkpoint=None, cluster=cluster, stop=threading.Event())


def test_each_broker_in_turn_comes_back_on_the_new_release_then_metadata_version_is_finalized(wired):
    c = Cluster()
    assert isinstance(c, BrokerVersions)
    out = RollingUpgrade("4.1.1").invoke(ctx_of(c), random.Random(1))
    assert out.outcome == EFFECTIVE and out.exercised, out
    order = out.evidence["order"]
    assert sorted(order) == [1, 2, 3]
    # one at a time: stopped, given the release, started on it, before the next goes down
    assert c.events == [e for n in order for e in (("stop", n), ("set", n, "4.1.1"), ("start", n, "4.1.1"))]
    assert all(b["logged_version"] == "4.1.1" for b in out.evidence["brokers"].values())
    assert out.evidence["features_before"] == {"metadata.version": "3.5-IV2"}
    assert out.evidence["features_after"] == {"metadata.version": "4.1-IV1"}
    assert wired == [("4.1.1", "4.1.1")]  # the new release's own tool
    again = RollingUpgrade("4.1.1").invoke(ctx_of(c), random.Random(2))
    assert again.outcome == SKIPPED and "already runs 4.1.1" in again.evidence["reason"]


def test_a_release_a_broker_cannot_get_stops_the_roll_there(wired):
    c = Cluster(refuse=2)
    out = RollingUpgrade("4.4.0").invoke(ctx_of(c), random.Random(0))
    assert out.outcome == NOT_EFFECTIVE and not out.exercised
    assert "Maven could not resolve" in out.evidence["brokers"][2]["error"]
    assert out.evidence["reason"].startswith("broker 2 could not be moved to 4.4.0: ")
    stopped = [e[1] for e in c.events if e[0] == "stop"]
    assert stopped[-1] == 2 and list(out.evidence["brokers"])[-1] == 2  # nothing after broker 2 went down
    assert wired == []  # no finalize on a half-rolled cluster


@pytest.mark.parametrize("broker,why", [
    ({"gone": False, "stop_s": 20.1}, "broker 3 was still running 20.1 s after its stop"),
    ({"gone": True, "rejoined_after_s": None}, "broker 3 did not register again within 90 s on 4.4.0"),
    ({"gone": True, "rejoined_after_s": 4.0, "in_sync_after_s": None, "out_of_sync": ["input:3"]},
     "broker 3 was not back in every ISR within 90 s (input:3)"),
    ({"gone": True, "rejoined_after_s": 4.0, "in_sync_after_s": 5.0, "logged_version": None},
     "broker 3's log named Kafka version None after its restart, not 4.4.0"),
])
def test_a_roll_that_did_not_take_names_the_first_broker_and_how(broker, why):
    done = {"gone": True, "rejoined_after_s": 3.0, "in_sync_after_s": 3.0, "logged_version": "4.4.0"}
    ev = {"to": "4.4.0", "order": [1, 3, 2], "brokers": {"1": done, "3": broker}}  # keys as read back from JSON
    assert rolling_upgrade.why_not_rolled(ev) == why
    assert rolling_upgrade.why_not_rolled({**ev, "brokers": {1: done}}) == "the roll stopped before broker 3"
    assert rolling_upgrade.why_not_rolled({**ev, "brokers": {"1": done, "3": done, "2": done}}) is None


def test_without_a_release_or_with_a_broker_down_nothing_is_touched(wired):
    c = Cluster()
    assert RollingUpgrade("").invoke(ctx_of(c), random.Random(0)).outcome == SKIPPED
    c.alive[3] = False
    out = RollingUpgrade("4.1.1").invoke(ctx_of(c), random.Random(0))
    assert out.outcome == SKIPPED and c.events == []


def test_it_runs_when_named_only_and_gets_its_release_from_the_run():
    assert "rolling-upgrade" not in catalog.all_specs()
    built = catalog.build(["rolling-upgrade"], kafka_upgrade_to="4.4.0", txn_timeout_ms=30000)
    assert built["rolling-upgrade"].upgrade_to == "4.4.0"


def test_the_version_line_is_waited_for_since_kafka_logs_it_after_the_broker_is_unfenced(monkeypatch):
    c = Cluster()
    reads = []

    def read_since(cluster, node, since):  # the line lands on the third read, as after a slow STARTED
        reads.append(node)
        return "INFO [BrokerServer id=2] Transition from STARTING to STARTED\n" + (
            "INFO Kafka version: 4.4.0 (AppInfoParser)\n" if len(reads) >= 3 else "")
    monkeypatch.setattr(broker_log, "read_since", read_since)
    assert rolling_upgrade._version_line(ctx_of(c), 2, 0, wait_s=10.0) == "4.4.0" and len(reads) == 3
    monkeypatch.setattr(broker_log, "read_since", lambda cluster, node, since: "no version here\n")
    assert rolling_upgrade._version_line(ctx_of(c), 2, 0, wait_s=0.5) is None
