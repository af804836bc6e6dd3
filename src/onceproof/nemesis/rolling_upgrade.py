"""``rolling-upgrade``: the brokers moved to a newer Kafka release one at a time, mid-run, the way Kafka's
upgrade docs say ("Upgrade the brokers one at a time: shut down the broker, update the code, and restart
it. Once you have done so, the brokers will be running the latest version") and Kafka's own
``tests/kafkatest/tests/core/kraft_upgrade_test.py`` and ``transactions_upgrade_test.py`` do: every node in
turn is stopped cleanly (SIGTERM, its controlled shutdown), restarted on the new release's jars with its own
data (:class:`onceproof.backends.base.BrokerVersions`), and back in the ISR of every partition it
replicates before the next one goes down. After the last one the feature levels are finalized:
``kafka-features upgrade --metadata X.Y`` (``clients/features.py``, which says why not
``--release-version``).

The release comes from ``--kafka-upgrade-to`` (``TestConfig.kafka_upgrade_to``); the cluster starts on
``--kafka-version`` (or the pin). A turn on a cluster already on that release everywhere is ``skipped``:
there is nothing left to upgrade (Kafka supports no downgrade across ``metadata.version`` changes).

Evidence, per broker: stop, rejoin and in-sync times, the shutdown lines, and the ``Kafka version: V``
line its own log printed after the restart (AppInfoParser); then ``metadata.version`` before and after
the finalize, read back with ``kafka-features describe`` (both with the new release's own tool, which knows
its ``metadata.version``). Effective when every broker came back on the
new release, logged it and rejoined every ISR; exercised when, in addition, the finalized
``metadata.version`` is the new release's line.
"""

from __future__ import annotations

import random
import re
import time

from onceproof.backends.base import BackendError
from onceproof.clients import features
from onceproof.nemesis import broker_log
from onceproof.nemesis.broker import _live, restart_stopped
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome
from onceproof.nemesis.operator import ISR_WAIT_S, _bounce, _rejoin, _shutdown_lines

VERSION_LINE_WAIT_S = 15.0
"""How long after a restarted broker is back in every ISR its log may take to name its release (s). Kafka
logs ``Kafka version: V`` (AppInfoParser) only after ``Transition from STARTING to STARTED``, which follows
the broker's unfencing (``kafka.server.BrokerServer.startup``, then ``KafkaRaftServer.startup``): the
harness can see the broker registered and in sync before the line is written."""


def _version_line(ctx: NemesisContext, node: int, since: int, wait_s: float = VERSION_LINE_WAIT_S) -> str | None:
    """The release the broker's log names after byte ``since`` (``Kafka version: 4.1.1``), polled every
    0.2 s for up to ``wait_s`` s (until teardown); ``None`` when it names none by then."""
    deadline = time.monotonic() + wait_s
    while True:
        m = re.findall(r"Kafka version: (\S+)", broker_log.read_since(ctx.cluster, node, since))
        if m or time.monotonic() >= deadline or ctx.teardown.wait(0.2):
            return m[-1] if m else None


def why_not_rolled(ev: dict) -> str | None:
    """One line naming the first broker of ``ev["order"]`` that did not come back on ``ev["to"]`` and how,
    ``None`` when every one came back (stopped, registered, in every ISR, its log naming ``to``): the roll's
    test of effect. ``ev``: the fault's evidence, ``brokers`` keyed by node id as ints or as strings read
    back from JSON."""
    brokers = {int(k): v for k, v in ev.get("brokers", {}).items()}
    to = ev.get("to", "?")
    for n in ev.get("order", []):
        b = brokers.get(n)
        if b is None:
            return f"the roll stopped before broker {n}"
        if not b.get("gone"):
            return f"broker {n} was still running {b.get('stop_s')} s after its stop"
        if "error" in b:
            return f"broker {n} could not be moved to {to}: {b['error']}"
        if b.get("rejoined_after_s") is None:
            return f"broker {n} did not register again within {ISR_WAIT_S:.0f} s on {to}"
        if b.get("in_sync_after_s") is None:
            lag = ", ".join(b.get("out_of_sync") or []) or "metadata unreadable"
            return f"broker {n} was not back in every ISR within {ISR_WAIT_S:.0f} s ({lag})"
        if b.get("logged_version") != to:
            return (f"broker {n}'s log named Kafka version {b.get('logged_version')} after its restart, "
                    f"not {to}")
    return None


class RollingUpgrade:
    """Every broker in turn: a clean stop, a restart on ``upgrade_to``'s jars, back in every ISR; then
    ``metadata.version`` finalized. Evidence and outcomes: the module docstring."""

    name = "rolling-upgrade"

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: per broker a controlled shutdown, a start on the new
        release and the replicas catching up (about 25 s each on 2 cores), then the finalize (a few s)."""
        return 3 * 25.0 + 10.0

    def __init__(self, kafka_upgrade_to: str = ""):
        self.upgrade_to = kafka_upgrade_to

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        if not self.upgrade_to:
            return Outcome(SKIPPED, "brokers", {"reason": "no release to upgrade to: run with --kafka-upgrade-to"})
        cluster = ctx.cluster
        nodes = sorted(_live(ctx))
        if len(nodes) < len(cluster.nodes):
            return Outcome(SKIPPED, "brokers", {"reason": "a broker is already down", "live": nodes})
        before = {n: cluster.version_of(n) for n in nodes}
        todo = [n for n in nodes if before[n] != self.upgrade_to]
        target = f"brokers to {self.upgrade_to}"
        if not todo:
            return Outcome(SKIPPED, target, {"reason": f"every broker already runs {self.upgrade_to}"})
        first = rng.randrange(len(todo))
        order = todo[first:] + todo[:first]  # a seeded first broker, then the others in turn
        ev: dict = {"to": self.upgrade_to, "from": before, "order": order, "brokers": {}}
        try:
            ev["features_before"] = features.describe(cluster.bootstrap, self.upgrade_to)
        except Exception as e:  # noqa: BLE001 - evidence only: the roll goes on
            ev["features_before_error"] = str(e)[:300]
        for n in order:
            if ctx.teardown.is_set() or ctx.stop.is_set():
                break
            b = _bounce(ctx, n)
            since = b["log_from"]
            try:
                cluster.set_version(n, self.upgrade_to)
            except BackendError as e:
                b["error"] = str(e)[:300]
            b.update(_rejoin(ctx, n, wait_isr=True))
            b["shutdown_log"] = _shutdown_lines(ctx, n, b.pop("log_from"))
            b["clean"] = bool(b["shutdown_log"])
            b["logged_version"] = _version_line(ctx, n, since)
            ev["brokers"][n] = b
            if b.get("in_sync_after_s") is None or "error" in b:
                break  # never take the next one down while this one is behind
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, target, {**ev, "reason": "run interrupted"})
        why = why_not_rolled(ev)
        if why is not None:
            return Outcome(NOT_EFFECTIVE, target, {**ev, "reason": why})
        try:
            ev["finalize"] = features.finalize(cluster.bootstrap, self.upgrade_to, self.upgrade_to)
            ev["features_after"] = after = features.describe(cluster.bootstrap, self.upgrade_to)
        except Exception as e:  # noqa: BLE001 - the brokers run the new release: effective, not exercised
            ev["finalize_error"] = str(e)[:600]
            return Outcome(EFFECTIVE, target, ev, exercised=False)
        line = ".".join(self.upgrade_to.split(".")[:2])
        mv = after.get("metadata.version", "")
        return Outcome(EFFECTIVE, target, ev, exercised=mv.startswith(f"{line}-"))

    def heal(self, ctx: NemesisContext) -> None:
        """Restart every broker that is not running, each on the release it was last given
        (``broker.restart_stopped``)."""
        restart_stopped(ctx)
