"""Disk faults on a broker's log directory, the ``disk`` package: a crashed broker's segment garbled before it
restarts, and a broker's disk full. Both aim at one broker (``leader``: the leader of a seeded output
partition; ``one``: a seeded broker) and never at more than a minority (``nemesis/broker.py``).

* ``corrupt-segment-tail[:leader|one]`` – the broker is SIGKILLed (as a crash would stop it); in its log
  directory (the backend's :class:`onceproof.backends.base.LogDirs`) the active segment of an output partition
  it hosts (the led partition for ``leader``; a seeded one for ``one``) has its tail garbled: from a seeded byte
  inside one of its last batches to the end of the file, every byte XORed with a non-zero seeded byte
  (``nemesis/log_segment.py`` chooses it). Held, restarted. Evidence: the segment, its size before and after,
  the byte range, the batches, offsets and transaction markers garbled, and the broker's own log recovery
  lines (Kafka 4.1.1 ``LogSegment.recover``: ``Found invalid messages in log segment <file> at byte offset
  <n>.``; ``LogLoader.recoverLog``: ``[LogLoader partition=<tp>, dir=<dir>] Corruption found in segment
  <base>, truncating to offset <o>``; ``LogManager``: ``Completed load of Log(dir=<partition dir>, ...) with
  <n> segments, local-log-start-offset <s> and log-end-offset <e>``). Effective: the broker logged that it
  found the corruption in that partition and truncated it. Exercised: the broker was back in the ISR of every
  partition it replicates (it refetched what it cut from the leader) within ``operator.ISR_WAIT_S``.
* ``disk-full[:leader|one]`` – the broker's data filesystem (size-limited, the backend's
  :class:`onceproof.backends.base.DiskFaults`: a tmpfs per node on the local backend, mounted only when a run
  plans this fault) is filled to the last byte by one file of the harness. The broker's next write fails with
  ``IOException: No space left on device``; Kafka's ``LogDirFailureChannel`` logs ``Error while appending
  records to <tp> in dir <dir>`` (or another ``Error while ... in dir``), ``ReplicaManager`` ``Stopping
  serving replicas in dir <dir> ...`` and ``LogManager`` ``Stopping serving logs in dir <dir>``. With one log
  directory, which is also the metadata log's, Kafka 4.x then halts the broker (``ReplicaManager``: ``Shutdown
  broker because the metadata log dir <dir> has failed``, or ``LogManager``: ``Shutdown broker because all log
  dirs in <dirs> have failed``; ``Exit.halt(1)``): the fault is a broker that stops on a full disk, its
  partitions led elsewhere. Held; heal: the fill removed, the broker restarted on its data (its log recovery
  drops the torn write). Effective: ``No space left on device`` and a log-directory failure (or the broker's
  exit) in its own log. Exercised: for ``leader``, the partition's leadership moved; and the broker was back
  in every ISR after the heal.

Heal, on every exit path: every fill removed (``DiskFaults.unfill_disk``), every stopped broker restarted
(unless an interrupted run is tearing the cluster down); the cluster's ``down`` unmounts the filesystems,
and the reaper unmounts them when the harness is SIGKILLed. A garbled segment is not undone: Kafka's recovery
is the repair under test.

With RF 3, ``acks=all`` and ``min.insync.replicas=2`` neither fault may lose an acknowledged record: every
acknowledged record is on every ISR member, and the cut broker refetches. With a single replica
(``--cluster-config single-replica``) ``corrupt-segment-tail`` destroys committed output records for good,
and the checker must call them lost (docs/faults.md, "Disk faults").
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

from onceproof.backends.base import GONE, DiskFaults, LogDir, LogDirs
from onceproof.nemesis import broker_log, log_segment
from onceproof.nemesis.broker import _BrokerFault, restart_stopped
from onceproof.nemesis.fault import EFFECTIVE, NOT_EFFECTIVE, SKIPPED, NemesisContext, Outcome, hold
from onceproof.nemesis.operator import ISR_WAIT_S, _rejoin, _rejoin_isr

DISK_TARGETS = ("leader", "one")
FAIL_WAIT_S = 20.0
"""How long ``disk-full`` waits, after the fill, for the broker to fail on it (s): the metadata log alone is
appended every 500 ms (KRaft's ``metadata.max.idle.interval.ms``), the replicas' fetches continually."""
INVALID = re.compile(r"Found invalid messages in log segment (\S+) at byte offset (\d+)")
CORRUPTION = re.compile(r"\[LogLoader partition=(\S+), dir=([^\]]+)\] Corruption found in segment (\d+), "
                        r"truncating to offset (\d+)")
LOADED = re.compile(r"Completed load of Log\(dir=([^,]+),.*?\) with (\d+) segments, local-log-start-offset (\d+) "
                    r"and log-end-offset (\d+)")
NO_SPACE = "No space left on device"
DIR_FAILED = (re.compile(r"Error while [^\n]*? in (?:log )?dir \S+"),  # LogDirFailureChannel.maybeAddOfflineLogDir
              re.compile(r"Error while writing to checkpoint file \S+"),
              re.compile(r"Stopping serving replicas in dir (\S+)"),  # ReplicaManager.handleLogDirFailure
              re.compile(r"Stopping serving logs in dir (\S+)"))  # LogManager.handleLogDirFailure
SHUTDOWN = re.compile(r"Shutdown broker because (?:the metadata log dir \S+ has failed|all log dirs in .+ have failed)")


def recovery(text: str, partition: str, segment: str = "") -> dict:
    """What a broker's log ``text`` says about recovering partition ``partition`` (``<topic>-<p>``) whose
    segment file ``segment`` (its path, or its ``<topic>-<p>/<name>.log`` tail) was garbled:
    ``{"found": the corruption was found, "invalid_at_byte": n | None, "segment_base": n | None,
    "truncated_to_offset": n | None, "log_end_offset": n | None, "lines": [...]}`` (the first of each kind,
    200 characters each). Pure."""
    out: dict = {"found": False, "invalid_at_byte": None, "segment_base": None, "truncated_to_offset": None,
                 "log_end_offset": None, "lines": []}
    tail = "/".join(Path(segment).parts[-2:]) if segment else ""
    for ln in text.splitlines():
        m = INVALID.search(ln)
        if m and out["invalid_at_byte"] is None and (not tail or m.group(1).endswith(tail)) \
                and Path(m.group(1)).parent.name == partition:
            out["invalid_at_byte"] = int(m.group(2))
            out["lines"].append(ln.strip()[:200])
        m = CORRUPTION.search(ln)
        if m and m.group(1) == partition and out["truncated_to_offset"] is None:
            out["segment_base"], out["truncated_to_offset"] = int(m.group(3)), int(m.group(4))
            out["lines"].append(ln.strip()[:200])
        m = LOADED.search(ln)
        if m and Path(m.group(1)).name == partition:  # the last load after the garbling counts
            out["log_end_offset"] = int(m.group(4))
    out["found"] = out["invalid_at_byte"] is not None or out["truncated_to_offset"] is not None
    return out


def disk_failure(text: str, limit: int = 6) -> dict:
    """What a broker's log ``text`` says about a failed log directory: ``{"no_space": lines naming
    ``No space left on device``, "dir_failed": a log directory was taken offline (:data:`DIR_FAILED`),
    "shutdown": the broker halted for it (:data:`SHUTDOWN`), "lines": up to ``limit`` of those lines}``. Pure."""
    out: dict = {"no_space": 0, "dir_failed": False, "shutdown": False, "lines": []}
    for ln in text.splitlines():
        hit = False
        if NO_SPACE in ln:
            out["no_space"] += 1
            hit = True
        if any(p.search(ln) for p in DIR_FAILED):
            out["dir_failed"] = hit = True
        if SHUTDOWN.search(ln):
            out["shutdown"] = hit = True
        if hit and len(out["lines"]) < limit:
            out["lines"].append(ln.strip()[:200])
    return out


def judge_disk_full(failure: dict, gone: bool) -> bool:
    """Did the full disk take effect? The broker logged ``No space left on device`` and a log directory
    failure, a halt for it, or it exited. Pure."""
    return bool(failure.get("no_space")) and (failure.get("dir_failed") or failure.get("shutdown") or gone)


STARTED = "Kafka Server started"
"""The line a KRaft node logs once it is up (``[KafkaRaftServer nodeId=<n>] Kafka Server started``); its log
recovery lines come before it."""
START_WAIT_S = 60.0


def _wait_started(ctx: NemesisContext, node: int, since: int, t0: float | None = None) -> float | None:
    """Seconds from ``t0`` (monotonic; default now) until broker ``node``'s log (after byte ``since``) says it
    started, waiting until ``t0`` + :data:`START_WAIT_S`; ``None`` when it did not. The metadata and the ISR
    may still list a broker killed seconds ago (its session has not expired), so "rejoined" and "in sync" are
    no proof that the restarted broker has loaded its logs."""
    if broker_log.broker_log(ctx.cluster, node) is None:  # nothing will say it (a cluster without broker logs)
        return None
    t0 = time.monotonic() if t0 is None else t0
    while time.monotonic() - t0 < START_WAIT_S:
        if STARTED in _read_since(ctx, node, since):
            return round(time.monotonic() - t0, 1)
        if ctx.teardown.wait(0.5):
            break
    return None


def _read_since(ctx: NemesisContext, node: int, since: int) -> str:
    """Broker ``node``'s log from byte ``since`` on; ``""`` when unreadable (``nemesis/broker_log.py``)."""
    return broker_log.read_since(ctx.cluster, node, since)


def _implements(cluster, protocol: type) -> bool:
    """The cluster's class implements ``protocol`` (asked of the class, as ``backends/capabilities.py`` does)."""
    return cluster is not None and issubclass(type(cluster), protocol)


def garble_partition(log_dir: LogDir, topic: str, partition: int | None, rng: random.Random) -> dict:
    """Garble the tail of the active segment of a ``topic`` partition in a stopped broker's ``log_dir``:
    ``partition`` when it has a batch there, else the first of the other hosted partitions (in a seeded
    order) that has one. Returns the evidence: ``partition``, ``segment`` (``<topic>-<p>/<file>``),
    ``segment_path`` (``log_dir.where``), ``trailing_bytes`` (a torn batch already there) and
    :class:`log_segment.Garble`'s fields; or ``{"reason"}`` when no hosted partition's active segment holds a
    batch.

    Raises: ``OSError`` reading or writing the segment."""
    hosted = log_segment.hosted_partitions(log_dir.listdir(), topic)
    others = [p for p in hosted if p != partition]
    order = ([partition] if partition in hosted else []) + rng.sample(others, len(others))
    for p in order:
        seg = log_segment.active_segment(log_dir.listdir(f"{topic}-{p}"))
        if seg is None:
            continue
        rel = f"{topic}-{p}/{seg}"
        data = log_dir.read(rel)
        found, trailing = log_segment.batches(data)
        g = log_segment.plan(found, len(data), rng)
        if g is None:
            continue
        log_segment.apply(log_dir, rel, g, rng)
        return {"partition": p, "segment": rel, "segment_path": log_dir.where(rel), "trailing_bytes": trailing,
                **g.evidence()}
    return {"reason": f"no batch in the active segment of any {topic} partition in {log_dir.where()} "
                      f"(hosted: {hosted})"}


OUTPUT_WAIT_S = 30.0
"""How long ``corrupt-segment-tail`` waits, before the kill, for an output partition on the broker to hold data (s):
a turn early in a run (the first micro-batches commit no records) would find nothing to garble."""


def wait_for_output(ctx: NemesisContext, log_dir: LogDir, topic: str, max_s: float | None = None) -> float | None:
    """Seconds until an active segment of a ``topic`` partition in the (running) broker's ``log_dir`` is not
    empty, polled every second up to ``max_s`` (default :data:`OUTPUT_WAIT_S`); ``None`` when none was (the
    turn goes on and says so)."""
    max_s = OUTPUT_WAIT_S if max_s is None else max_s
    t0 = time.monotonic()
    while True:
        for p in log_segment.hosted_partitions(log_dir.listdir(), topic):
            seg = log_segment.active_segment(log_dir.listdir(f"{topic}-{p}"))
            if seg is not None and (log_dir.size(f"{topic}-{p}/{seg}") or 0) > 0:
                return round(time.monotonic() - t0, 2)
        if time.monotonic() - t0 >= max_s or ctx.stop.wait(1.0):
            return None


class CorruptSegmentTail(_BrokerFault):
    """SIGKILL a broker, garble the tail of an output partition's active segment in its log directory, hold,
    restart it and watch its log recovery truncate the damage and the broker refetch it."""

    name = "corrupt-segment-tail"
    target_choices = DISK_TARGETS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: the kill and the garbling (under a second), the hold, the
        restart with its log recovery (about 10 s on 2 cores) and the refetch into every ISR (about 10 s)."""
        return hold_s + 25.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        cluster = ctx.cluster
        if not _implements(cluster, LogDirs):
            return Outcome(SKIPPED, "", {"reason": "this backend's cluster cannot reach a broker's log directory"})
        target, choice = self._choose(ctx, rng)
        if not choice.nodes:
            return Outcome(SKIPPED, target, choice.why)
        node = choice.nodes[0]
        ev: dict = {"target": target, **choice.why, "node": node}
        log_dir = cluster.log_dir_of(node)
        ev["waited_for_output_s"] = wait_for_output(ctx, log_dir, ctx.output_topic)
        since = broker_log.size(ctx.cluster, node)
        killed = cluster.kill(node)
        t_kill = time.monotonic()
        ev["killed"] = {"pid": killed.pid, "status_after": killed.status}
        if killed.status != GONE:  # never write the files of a broker that may still be writing them
            return Outcome(NOT_EFFECTIVE, f"{target}: broker {node}", {**ev, "reason": "the broker did not die"})
        try:
            ev["garble"] = garble_partition(log_dir, ctx.output_topic, choice.why.get("partition"), rng)
        except (OSError, ValueError) as e:
            ev["garble"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        left = max(0.0, ctx.hold_s - (time.monotonic() - t_kill))
        ev["held_s"] = round(time.monotonic() - t_kill + hold(ctx, left), 2)
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, f"{target}: broker {node}", {**ev, "reason": "run interrupted"})
        ev.update(_rejoin(ctx, node, wait_isr=False))
        ev["started_after_s"] = _wait_started(ctx, node, since)
        ev.update(_rejoin_isr(ctx, node))
        g = ev["garble"]
        label = f"{target}: broker {node}" + (f" {g['segment']}" if "segment" in g else "")
        if "segment" not in g:
            return Outcome(NOT_EFFECTIVE, label, ev)
        g["size_after"] = log_dir.size(g["segment"])
        rec = recovery(_read_since(ctx, node, since), f"{ctx.output_topic}-{g['partition']}", g["segment"])
        rec["as_planned"] = rec["invalid_at_byte"] == g["batch_start"] or rec["truncated_to_offset"] == g["base_offset"]
        ev["recovery"] = rec
        effective = rec["found"]
        exercised = effective and ev.get("in_sync_after_s") is not None
        if effective and not exercised:
            ev["not_exercised"] = f"broker {node} was not back in every ISR within {ISR_WAIT_S:.0f} s"
        return Outcome(EFFECTIVE if effective else NOT_EFFECTIVE, label, ev, exercised=exercised)

    def heal(self, ctx: NemesisContext) -> None:
        """Restart every broker that is not running, unless an interrupted run is tearing the cluster down."""
        restart_stopped(ctx)


class DiskFull(_BrokerFault):
    """Fill a broker's size-limited data filesystem; it fails on it (and halts); hold; empty it, restart it."""

    name = "disk-full"
    target_choices = DISK_TARGETS

    @staticmethod
    def expected_s(target: str, hold_s: float, txn_timeout_ms: int) -> float:
        """Expected length of one turn, seconds: the failure (a second or two), the hold (for ``leader`` at
        least until KRaft fences the halted broker, ``broker.session.timeout.ms`` 9 s), the restart and the
        refetch into every ISR (about 20 s on 2 cores)."""
        return max(hold_s, 10.0) + 25.0

    def invoke(self, ctx: NemesisContext, rng: random.Random) -> Outcome:
        cluster = ctx.cluster
        if not _implements(cluster, DiskFaults):
            return Outcome(SKIPPED, "", {"reason": "this backend's cluster has no size-limited disks"})
        why = cluster.disk_unavailable()
        if why:
            return Outcome(SKIPPED, "", {"reason": why})
        target, choice = self._choose(ctx, rng)
        if not choice.nodes:
            return Outcome(SKIPPED, target, choice.why)
        node = choice.nodes[0]
        ev: dict = {"target": target, **choice.why, "node": node}
        since = broker_log.size(ctx.cluster, node)
        moved = None
        t0 = time.monotonic()
        try:
            ev["fill"] = cluster.fill_disk(node)
            ev.update(self._wait_failure(ctx, node, since))
            if target == "leader" and ev["gone"]:
                moved = self._wait_moved(ctx, choice, ev)
            left = max(0.0, ctx.hold_s - (time.monotonic() - t0))
            ev["held_s"] = round(time.monotonic() - t0 + hold(ctx, left), 2)
        finally:
            ev["freed_bytes"] = cluster.unfill_disk(node)
        if ctx.teardown.is_set():
            return Outcome(SKIPPED, f"{target}: broker {node}", {**ev, "reason": "run interrupted"})
        if cluster.state(node).alive:
            ev["still_running"] = True  # it outlived the full disk: nothing to restart
        else:
            ev.update(_rejoin(ctx, node, wait_isr=True))
        ev["failure"] = disk_failure(_read_since(ctx, node, since))
        effective = judge_disk_full(ev["failure"], ev.get("gone", False))
        exercised = effective and moved is not False and ev.get("in_sync_after_s") is not None
        if effective and not exercised:
            ev["not_exercised"] = ("the partition's leadership did not move" if moved is False else
                                   f"broker {node} was not back in every ISR within {ISR_WAIT_S:.0f} s")
        return Outcome(EFFECTIVE if effective else NOT_EFFECTIVE, f"{target}: broker {node}", ev, exercised=exercised)

    @staticmethod
    def _wait_failure(ctx: NemesisContext, node: int, since: int) -> dict:
        """Poll (≤ :data:`FAIL_WAIT_S`) until broker ``node`` has exited and its log shows the failure:
        ``{"gone": exited, "failed_after_s": seconds to both (``None``: not both)}``."""
        t0 = time.monotonic()
        while True:
            gone = not ctx.cluster.state(node).alive
            failure = disk_failure(_read_since(ctx, node, since))
            if gone and judge_disk_full(failure, gone):
                return {"gone": True, "failed_after_s": round(time.monotonic() - t0, 2)}
            if time.monotonic() - t0 >= FAIL_WAIT_S or ctx.stop.wait(0.3):
                return {"gone": gone, "failed_after_s": None}

    def heal(self, ctx: NemesisContext) -> None:
        """Remove every fill (always: safe, repeatedly), then restart every broker that is not running unless an
        interrupted run is tearing the cluster down."""
        cluster = ctx.cluster
        if _implements(cluster, DiskFaults):
            for n in cluster.nodes:
                cluster.unfill_disk(n)
        restart_stopped(ctx)
