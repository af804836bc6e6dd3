"""``lose-unsynced-writes``: one broker loses power as far as its disk can tell (issue 29, item 3). Its process is
SIGKILLed and every byte it wrote to its ``log.dirs`` since that file's last ``fsync`` is dropped, then it is
restarted on what is left and must recover its log, as after a power cut (the backend's
:class:`onceproof.backends.base.UnsyncedLoss`; on the local backend a FUSE layer under each broker's
``log.dirs``, ``backends/common/lazyfs.py``, after Jepsen's LazyFS).

Kafka fsyncs a segment when it rolls and the recovery-point checkpoints when it writes them, not on each append
(``log.flush.interval.messages`` is unbounded by default): what a broker acknowledged is durable because
``acks=all`` put it on ``min.insync.replicas`` brokers, not on its own disk. So the broker that lost power
comes back with a shorter log than it had acknowledged and must truncate to, then fetch from, the leader
(KIP-101's leader epochs); producer state and transaction markers in the lost tail go with it, and its
``__transaction_state`` partitions are reloaded from what is left. A turn hits one broker at a time, so a majority
always keeps the data; losing power on every broker at once (where ``acks=all`` alone does not save a write)
is not offered.

Targets as ``kill-broker``: ``one``, ``leader`` (of an output partition: held down until the leadership moved,
≤ 25 s), ``txn-coordinator`` (of one sink ``transactional.id``).

Evidence: per broker, what the layer held unsynced just before (``unsynced_before``: files, bytes), what the
crash dropped (``dropped_files``, ``dropped_bytes``, ``cut_bytes``, ``restored_bytes``, the largest
``files`` with their ``written`` and ``synced_size``), the killed pid and its status, ``rejoined_after_s``, and
the broker's recovery lines logged after the restart (``recovery_log``: Kafka's ``Recovering unflushed
segment``, truncations, invalid or corrupt records, ``recovered_unflushed`` counted). Effective: the broker was
killed and the layer dropped its unsynced writes. Exercised: bytes of a segment (``.log``) of the run's
input, output or ``__transaction_state`` topics were dropped (the pipeline's own data; for ``leader`` and
``txn-coordinator`` also the move).
"""

from __future__ import annotations

import random
import re
import time

from onceproof.backends.base import UnsyncedLoss
from onceproof.nemesis import broker_log
from onceproof.nemesis.broker import _BrokerFault, restart
from onceproof.nemesis.disk import _implements, _read_since, _wait_started
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold

TARGETS = ("one", "leader", "txn-coordinator")
RECOVERY = re.compile(r"[Rr]ecover|unflushed|[Tt]runcat|[Ii]nvalid (?:messages|records|batch)|[Cc]orrupt|"
                      r"[Uu]nclean shutdown|clean shutdown file")
"""Kafka's log-recovery lines worth keeping as evidence (LogLoader, LogManager, UnifiedLog)."""
UNFLUSHED = re.compile(r"Recovering unflushed segment")
MAX_LINES = 30
MAX_FILES = 12
TXN_STATE = "__transaction_state"


def _partition_topic(path: str) -> str:
    """The topic of a file under a log directory: ``/output-3/00000000000000000000.log`` → ``output``."""
    parts = [p for p in path.split("/") if p]
    d = parts[0] if parts else ""
    return d.rsplit("-", 1)[0] if "-" in d and d.rsplit("-", 1)[1].isdigit() else ""


def pipeline_loss(files: dict[str, dict], topics: set[str]) -> dict[str, int]:
    """Bytes written and dropped per topic among ``topics``, counting only segments (``.log`` files);
    ``files`` is the crash's ``{path: {"written", ...}}``. Pure."""
    out: dict[str, int] = {}
    for path, f in files.items():
        t = _partition_topic(path)
        if t in topics and path.endswith(".log") and f.get("written", 0) > 0:
            out[t] = out.get(t, 0) + int(f["written"])
    return out


def recovery_lines(text: str) -> list[str]:
    """The lines of ``text`` (a broker's log since the restart) that :data:`RECOVERY` matches. Pure."""
    return [ln.strip() for ln in text.splitlines() if RECOVERY.search(ln)]


class LoseUnsyncedWrites(_BrokerFault):
    """SIGKILL the target broker, drop what it had not fsynced, hold, restart it on what is left, wait for it
    to rejoin; evidence in the module docstring."""

    name = "lose-unsynced-writes"
    target_choices = TARGETS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: as ``kill-broker``'s, plus the broker's log recovery."""
        return (max(hold_s, 10.0) if target in ("leader", "txn-coordinator", "") else hold_s) + 15.0

    def __init__(self, target: str | None = None):
        if target is not None and target not in TARGETS:
            raise ValueError(f"unknown target {target!r} for {self.name}; choose from {', '.join(TARGETS)}")
        self.target = target

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        cluster = ctx.cluster
        if not _implements(cluster, UnsyncedLoss):
            return Outcome(SKIPPED, self.target or "", {"reason": "this backend's cluster cannot lose unsynced writes"})
        why = cluster.unsynced_unavailable()
        if why:
            return Outcome(SKIPPED, self.target or "", {"reason": why})
        target, choice = self._choose(ctx, rng)
        if not choice.nodes:
            return Outcome(SKIPPED, target, choice.why)
        ev: dict = {"target": target, **choice.why, "nodes": choice.nodes, "lost": {}}
        marks = {n: broker_log.size(ctx.cluster, n) for n in choice.nodes}
        topics = {ctx.input_topic, ctx.output_topic, TXN_STATE}
        dropped_pipeline: dict[str, int] = {}
        for n in choice.nodes:
            before = cluster.unsynced(n)
            out = cluster.lose_unsynced(n)
            files = out.get("files", {})
            loss = pipeline_loss(files, topics)
            for t, b in loss.items():
                dropped_pipeline[t] = dropped_pipeline.get(t, 0) + b
            biggest = sorted(files.items(), key=lambda kv: -kv[1].get("written", 0))[:MAX_FILES]
            ev["lost"][n] = {"killed": out.get("killed"),
                             "unsynced_before": {k: before.get(k) for k in ("unsynced_files", "unsynced_bytes")},
                             **{k: out.get(k) for k in ("dropped_files", "dropped_bytes", "cut_bytes", "restored_bytes",
                                                        "open_handles")},
                             "pipeline_bytes": loss, "files": dict(biggest)}
        t_kill = time.monotonic()
        moved = self._wait_moved(ctx, choice, ev) if target in ("leader", "txn-coordinator") else None
        ev["held_s"] = round(time.monotonic() - t_kill + hold(ctx, max(0.0, ctx.hold_s - (time.monotonic() - t_kill))),
                             2)
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, f"{target}: broker {choice.nodes}", {**ev, "reason": "run interrupted"})
        t_start = time.monotonic()
        ev["rejoined_after_s"] = restart(ctx, choice.nodes)
        ev["started_after_s"] = {}
        for n, off in marks.items():
            # the recovery lines are read once the broker's own log says it started, not at "rejoined"
            ev["started_after_s"][n] = _wait_started(ctx, n, off, t_start)
            lines = recovery_lines(_read_since(ctx, n, off))
            ev["lost"][n]["recovery_log"] = lines[:MAX_LINES]
            ev["lost"][n]["recovered_unflushed"] = sum(1 for ln in lines if UNFLUSHED.search(ln))
        ev["pipeline_bytes_dropped"] = dropped_pipeline
        ok = all(v["killed"] and v["killed"].get("status_after") == "gone" and v["dropped_files"] is not None
                 for v in ev["lost"].values())
        exercised = bool(dropped_pipeline) and (moved is None or moved)
        if not exercised:
            ev["not_exercised"] = ("no leadership moved" if dropped_pipeline else
                                   "no unsynced bytes of the pipeline's topics' segments were dropped")
        return Outcome(EFFECTIVE if ok else NOT_EFFECTIVE, f"{target}: broker {choice.nodes}", ev, exercised=exercised)

    def heal(self, ctx: NemesisContext) -> None:
        """Restart every broker that is not running, unless an interrupted run is tearing the cluster down
        (nothing else to undo: what was lost stays lost, as after a power cut)."""
        if ctx.teardown.is_set():
            return
        dead = [n for n in ctx.cluster.nodes if not ctx.cluster.state(n).alive]
        if dead:
            restart(ctx, dead)
