"""Operators' restarts, the ``operator`` package: what a person running Kafka does on purpose, in the
middle of transactions, as Kafka's own ``transactions_test`` does (``bounce_target="brokers"``, clean and
hard bounces; tests/kafkatest/tests/core/transactions_test.py).

* ``bounce-broker[:one|leader|txn-coordinator]``: a clean stop (SIGTERM: the broker's controlled
  shutdown moves its leaderships away before it exits, KIP-631's ``BrokerLifecycleManager``), held
  ``ctx.hold_s``, then restarted on its data. Evidence: how long the stop took (a stop that needed the
  backend's SIGKILL after :data:`STOP_GRACE_S` is recorded, ``exited_on_sigterm``), the broker gone, the
  leader or coordinator that moved, the shutdown lines of the broker's own log (none: not a controlled
  shutdown, ``not-effective``), the rejoin time.
* ``rolling-restart``: every broker in turn, each cleanly stopped, restarted and back in the ISR of every
  partition it replicates (every topic, internal ones included) before the next, as an operator's
  rolling upgrade waits for ``UnderReplicatedPartitions`` = 0. Evidence per broker: stop, rejoin and
  in-sync times; ``not-effective`` when a broker was not back in sync within :data:`ISR_WAIT_S`.
* ``elect-leaders``: a preferred leader election on every partition (KIP-460; unclean election is never
  asked for). Evidence: the partitions whose leader moved; exercised when one of the output topic's did
  (``ELECTION_NOT_NEEDED`` everywhere: every leader was already preferred, nothing moved).

The brokers are reached only through the backend's :class:`onceproof.backends.base.Cluster` and the
cluster's Admin API.
"""

from __future__ import annotations

import random
import time

from onceproof.clients import topics
from onceproof.nemesis import broker_log, targets
from onceproof.nemesis.broker import _BrokerFault, _live, restart, restart_stopped
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold

STOP_GRACE_S = 20.0
"""The SIGTERM → SIGKILL grace of a bounce (``Cluster.stop(clean=True, grace_s=...)``, s). The bounce is
judged by the controlled shutdown (the SIGTERM handled, the leaderships moved), not by the JVM's exit; a
broker that needed the backend's SIGKILL is recorded (``exited_on_sigterm``). A local broker on 2 cores
exits on its SIGTERM in about 3 s."""
ISR_WAIT_S = 90.0
"""How long a restarted broker may take to be back in the ISR of all its partitions (s)."""
SHUTDOWN_LINES = ("due to signal SIGTERM", "to SHUTTING_DOWN", "controlled shutdown", "shut down completed")
"""Lines of a broker's own log that show it shutting down on the SIGTERM (Kafka 4.1 logs ``Terminating
process due to signal SIGTERM``, ``[BrokerServer id=N] Transition from STARTED to SHUTTING_DOWN``; log4j
may stop before the last lines)."""


def _shutdown_lines(ctx: NemesisContext, node: int, since: int, limit: int = 4) -> list[str]:
    """The controlled-shutdown lines the broker logged after byte ``since`` of its log."""
    text = broker_log.read_since(ctx.cluster, node, since)
    hits = [ln.strip()[-200:] for ln in text.splitlines() if any(s in ln for s in SHUTDOWN_LINES)]
    return hits[:limit]


def _out_of_sync(bootstrap: str, node: int) -> list[str] | None:
    """Partitions (``topic:partition``) that ``node`` replicates but is not in the ISR of; ``None`` when
    the metadata could not be read."""
    try:
        view = topics.replica_view(bootstrap)
    except Exception:  # noqa: BLE001 - a broker restarting: not known yet
        return None
    return [f"{t}:{p}" for t, parts in view.items() for p, m in parts.items()
            if node in m["replicas"] and node not in m["isr"]]


def _bounce(ctx: NemesisContext, node: int) -> dict:
    """Cleanly stop ``node`` (timed), with the log offset to read its shutdown lines from."""
    since = broker_log.size(ctx.cluster, node)
    t = time.monotonic()
    ctx.cluster.stop(node, clean=True, grace_s=STOP_GRACE_S)
    stop_s = round(time.monotonic() - t, 2)
    return {"stop_s": stop_s, "gone": not ctx.cluster.state(node).alive,
            "exited_on_sigterm": stop_s < STOP_GRACE_S - 0.5, "log_from": since}


def _rejoin(ctx: NemesisContext, node: int, wait_isr: bool) -> dict:
    """Start ``node`` and wait for it to register (and, with ``wait_isr``, to be back in every ISR)."""
    t0 = time.monotonic()
    out: dict = {"rejoined_after_s": restart(ctx, [node], ISR_WAIT_S)[node]}
    if not wait_isr or out["rejoined_after_s"] is None:
        return out
    return {**out, **_rejoin_isr(ctx, node, t0)}


def _rejoin_isr(ctx: NemesisContext, node: int, t0: float | None = None) -> dict:
    """Wait (≤ ``ISR_WAIT_S`` from ``t0``, default now) until ``node`` is back in the ISR of every partition it
    replicates: ``{"in_sync_after_s": s or None, "out_of_sync"?: [...]}``."""
    t0 = time.monotonic() if t0 is None else t0
    lagging: list[str] | None = None
    while time.monotonic() - t0 < ISR_WAIT_S and not ctx.teardown.is_set():
        lagging = _out_of_sync(ctx.cluster.bootstrap, node)
        if lagging == []:
            return {"in_sync_after_s": round(time.monotonic() - t0, 1)}
        ctx.teardown.wait(1.0)
    return {"in_sync_after_s": None, "out_of_sync": (lagging or [])[:10]}


class BounceBroker(_BrokerFault):
    """A clean stop (SIGTERM, controlled shutdown) of the target broker, held ``ctx.hold_s``, restarted."""

    name = "bounce-broker"
    target_choices = ("one", "leader", "txn-coordinator")

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``): the
        controlled shutdown (a few s), the hold, the rejoin (about 10 s on 2 cores)."""
        return hold_s + 18.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        target, choice = self._choose(ctx, rng)
        if not choice.nodes:
            return Outcome(SKIPPED, target, choice.why)
        node = choice.nodes[0]
        ev = {"target": target, **choice.why, "nodes": [node]}
        if target == "leader":
            ev["leader_before"] = node
        ev.update(_bounce(ctx, node))
        moved = None
        if target in ("leader", "txn-coordinator"):
            moved = self._wait_moved(ctx, choice, ev, max_s=10.0)
        ev["held_s"] = hold(ctx, ctx.hold_s)
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, f"{target}: broker {node}", {**ev, "reason": "run interrupted"})
        ev.update(_rejoin(ctx, node, wait_isr=False))
        ev["shutdown_log"] = _shutdown_lines(ctx, node, ev.pop("log_from"))
        ev["clean"] = bool(ev["shutdown_log"])  # the broker handled the SIGTERM: a controlled shutdown began
        ok = ev["gone"] and ev["clean"]
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{target}: broker {node}", ev, exercised=moved)

    def heal(self, ctx: NemesisContext) -> None:
        """Restart the bounced broker if a turn cut short left it stopped (``broker.restart_stopped``)."""
        restart_stopped(ctx)


class RollingRestart:
    """Every broker in turn: a clean stop, a restart, back in every ISR before the next."""

    name = "rolling-restart"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: per broker a controlled shutdown, a restart and the
        replicas catching up (about 20 s each on 2 cores)."""
        return 3 * 22.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        nodes = sorted(_live(ctx))
        if len(nodes) < len(ctx.cluster.nodes):
            return Outcome(SKIPPED, "brokers", {"reason": "a broker is already down", "live": nodes})
        first = rng.randrange(len(nodes))
        order = nodes[first:] + nodes[:first]  # a seeded first broker, then the others in turn
        ev: dict = {"order": order, "brokers": {}}
        for n in order:
            if ctx.teardown.is_set() or ctx.stop.is_set():
                break
            b = _bounce(ctx, n)
            b.update(_rejoin(ctx, n, wait_isr=True))
            b["shutdown_log"] = _shutdown_lines(ctx, n, b.pop("log_from"))
            b["clean"] = bool(b["shutdown_log"])
            ev["brokers"][n] = b
            if b.get("in_sync_after_s") is None:
                break  # never take the next one down while this one is behind
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, "brokers", {**ev, "reason": "run interrupted"})
        done = [n for n, b in ev["brokers"].items()
                if b["gone"] and b["clean"] and b.get("in_sync_after_s") is not None]
        ok = done == order
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"brokers {order}", ev)

    def heal(self, ctx: NemesisContext) -> None:
        """Restart every broker that is not running (``broker.restart_stopped``)."""
        restart_stopped(ctx)


class ElectLeaders:
    """A preferred leader election on every partition (never unclean)."""

    name = "elect-leaders"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: the election and a settle."""
        return 4.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        before = targets.partition_leaders(ctx.cluster.bootstrap, ctx.output_topic)
        try:
            result = topics.elect_preferred_leaders(ctx.cluster.bootstrap)
        except Exception as e:  # noqa: BLE001 - the request as a whole failed: recorded, not raised
            return Outcome(NOT_EFFECTIVE, "every partition", {"error": str(e)})
        time.sleep(1.0)
        after = targets.partition_leaders(ctx.cluster.bootstrap, ctx.output_topic)
        elected = sorted(k for k, err in result.items() if err is None)
        errors = {k: err for k, err in result.items() if err is not None and "ELECTION_NOT_NEEDED" not in err}
        moved = {p: [before.get(p), after.get(p)] for p in sorted(after) if before.get(p) != after.get(p)}
        ev = {"elected": elected[:20], "elected_count": len(elected), "not_needed": len(result) - len(elected)
              - len(errors), "errors": dict(list(errors.items())[:10]), "output_leaders_moved": moved}
        return Outcome(EFFECTIVE if not errors else NOT_EFFECTIVE, "every partition", ev,
                       exercised=bool(moved))

    def heal(self, ctx: NemesisContext) -> None:
        """Nothing to undo: an election leaves no fault behind (the preferred leaders are where they belong)."""
