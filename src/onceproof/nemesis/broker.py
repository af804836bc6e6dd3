"""Broker faults: ``kill-broker`` (SIGKILL, restart after ``hold_s``) and ``pause-broker`` (SIGSTOP, SIGCONT
after ``hold_s``), aimed by ``nemesis/targets.py`` at ``one``, ``minority``, ``leader`` (of an output
partition) or ``txn-coordinator`` (of one of the sink's transactional ids).

Both are start/stop faults run inside one op, so a fault is always undone by the time its op completes;
``heal`` restarts or resumes anything an interrupted op left behind. Evidence: pids, process state
before/after (``T`` = stopped), the coordinator before and during the fault, and how long the restarted
broker took to rejoin the cluster's metadata. The brokers are reached only through the backend's
:class:`onceproof.backends.base.Cluster` (kill, start, pause, resume, state).
"""

from __future__ import annotations

import random
import time

from onceproof.backends.base import GONE, STOPPED, ZOMBIE
from onceproof.nemesis import targets
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold
from onceproof.sinks.base import TRANSACTIONS


def _live(ctx: NemesisContext) -> list[int]:
    return [n for n in ctx.cluster.nodes if ctx.cluster.state(n).alive]


def _registered(bootstrap: str, node: int) -> bool:
    try:
        return node in targets.topics.admin(bootstrap).list_topics(timeout=5).brokers
    except Exception:  # noqa: BLE001 - brokers electing; treat as not yet
        return False


def restart(ctx: NemesisContext, nodes: list[int], timeout_s: float = 90.0) -> dict:
    """Start ``nodes`` on their data and wait (≤ ``timeout_s`` s, until teardown) for each to register in
    the cluster's metadata: ``{node: seconds to rejoin, or None}``."""
    t0 = time.monotonic()
    for n in nodes:
        ctx.cluster.start(n)
    out = {}
    for n in nodes:
        # the poll that saw the node decides: a second metadata request may be answered by a broker whose
        # metadata has not yet replayed the registration, and would turn a rejoin into a failed one
        seen = _registered(ctx.cluster.bootstrap, n)
        while not seen and time.monotonic() - t0 < timeout_s and not ctx.teardown.wait(0.5):
            seen = _registered(ctx.cluster.bootstrap, n)
        out[n] = round(time.monotonic() - t0, 1) if seen else None
    return out


def restart_stopped(ctx: NemesisContext) -> None:
    """A heal: start every broker that is not running, unless an interrupted run is tearing the cluster down
    (safe at any time, repeatedly)."""
    if ctx.teardown.is_set() or ctx.cluster is None:
        return
    for n in ctx.cluster.nodes:
        if not ctx.cluster.state(n).alive:
            ctx.cluster.start(n)


class _BrokerFault:
    name = ""
    target_choices = targets.TARGETS

    @staticmethod
    def sink_needs(target: str) -> frozenset[str]:
        """The sink capabilities (``sinks/base.py``) target ``target`` needs: a transaction coordinator
        exists only for a sink with transactional.ids."""
        return frozenset({TRANSACTIONS}) if target == "txn-coordinator" else frozenset()

    def __init__(self, target: str | None = None):
        if target is not None and target not in targets.TARGETS:
            raise ValueError(f"unknown target {target!r} for {self.name}; choose from {', '.join(targets.TARGETS)}")
        self.target = target

    def _choose(self, ctx: NemesisContext, rng: random.Random) -> tuple[str, targets.Choice]:
        target = self.target or rng.choice(list(self.target_choices))
        live = _live(ctx)
        # never take down more than a minority: min.insync.replicas=2 of RF 3 must stay writable
        choice = targets.choose(target, ctx.cluster.bootstrap, live, rng, output_topic=ctx.output_topic,
                                sink_ids=ctx.sink_ids)
        if len(live) - len(choice.nodes) < (len(ctx.cluster.nodes) // 2 + 1):
            return target, targets.Choice([], {"reason": "would leave no majority", "live": live})
        return target, choice

    def _coordinator(self, ctx: NemesisContext, choice: targets.Choice) -> int | None:
        tid = choice.why.get("transactional_id")
        return targets.txn_coordinator(ctx.cluster.bootstrap, tid)[0] if tid else None

    def _wait_moved(self, ctx: NemesisContext, choice: targets.Choice, ev: dict, max_s: float = 25.0) -> bool:
        """Keep the broker down until the partition it led (``leader``) or the ``__transaction_state``
        partition of the chosen transactional id (``txn-coordinator``) has a new live leader: only then
        did the pipeline have to fail over (KRaft notices a dead broker after
        ``broker.session.timeout.ms``, 9 s by default). ≤ ``max_s`` s; records the new leader."""
        t = time.monotonic()
        gone = set(choice.nodes)
        while True:
            if "transactional_id" in choice.why:
                now = self._coordinator(ctx, choice)
                ev["coordinator_during"] = now
            else:
                leaders = targets.partition_leaders(ctx.cluster.bootstrap, ctx.output_topic)
                now = leaders.get(choice.why["partition"], -1)
                ev["leader_during"] = now
            if now is not None and now >= 0 and now not in gone:
                ev["moved_after_s"] = round(time.monotonic() - t, 1)
                return True
            if time.monotonic() - t >= max_s or ctx.stop.wait(0.5):
                ev["moved_after_s"] = None
                return False


class KillBroker(_BrokerFault):
    """SIGKILL the target broker(s), wait ``ctx.hold_s``, restart them on their data, wait for rejoin."""

    name = "kill-broker"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        # leader / coordinator: down until the move (KRaft: broker.session.timeout.ms, 9 s); then ~10 s to rejoin
        return (max(hold_s, 10.0) if target in ("leader", "txn-coordinator", "") else hold_s) + 12.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        target, choice = self._choose(ctx, rng)
        if not choice.nodes:
            return Outcome(SKIPPED, target, choice.why)
        ev = {"target": target, **choice.why, "nodes": choice.nodes, "killed": {}}
        for n in choice.nodes:
            killed = ctx.cluster.kill(n)
            ev["killed"][n] = {"pid": killed.pid, "status_after": killed.status}
        t_kill = time.monotonic()
        moved = self._wait_moved(ctx, choice, ev) if target in ("leader", "txn-coordinator") else None
        waited = time.monotonic() - t_kill
        ev["held_s"] = round(waited + hold(ctx, max(0.0, ctx.hold_s - (time.monotonic() - t_kill))), 2)
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, f"{target}: broker {choice.nodes}", {**ev, "reason": "run interrupted"})
        ev["rejoined_after_s"] = restart(ctx, choice.nodes)
        # exited: reaped (gone), or a zombie whose parent is another process (a warm cluster's owner reaps it)
        ok = all(k["status_after"] in (GONE, ZOMBIE) for k in ev["killed"].values())
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{target}: broker {choice.nodes}", ev, exercised=moved)

    def heal(self, ctx: NemesisContext) -> None:
        """Restart every broker that is not running, unless an interrupted run is tearing the cluster down."""
        if ctx.teardown.is_set():
            return
        dead = [n for n in ctx.cluster.nodes if not ctx.cluster.state(n).alive]
        if dead:
            restart(ctx, dead)


class PauseBroker(_BrokerFault):
    """SIGSTOP the target broker(s), hold ``ctx.hold_s``, SIGCONT."""

    name = "pause-broker"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds (see ``onceproof.nemesis.catalog.expected_s``)."""
        return hold_s + 2.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        target, choice = self._choose(ctx, rng)
        if not choice.nodes:
            return Outcome(SKIPPED, target, choice.why)
        ev = {"target": target, **choice.why, "nodes": choice.nodes, "paused": {}}
        for n in choice.nodes:
            ctx.cluster.pause(n)
            time.sleep(0.2)
            st = ctx.cluster.state(n)
            ev["paused"][n] = {"pid": st.pid, "status_paused": st.status}
        ev["held_s"] = hold(ctx, ctx.hold_s)
        for n in choice.nodes:
            ctx.cluster.resume(n)
            time.sleep(0.2)
            ev["paused"][n]["status_resumed"] = ctx.cluster.state(n).status
        ok = all(p["status_paused"] == STOPPED for p in ev["paused"].values())
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{target}: broker {choice.nodes}", ev)

    def heal(self, ctx: NemesisContext) -> None:
        """SIGCONT every broker."""
        for n in ctx.cluster.nodes:
            ctx.cluster.resume(n)
