"""A session's live snapshot, ``<results root>/.sessions/<id>/live.json``: what ``onceproof watch`` draws.

The supervisor writes it once a second (:class:`LiveStatus`), from what it already owns: the workload's
acknowledgements (with the input's end per partition), the live reader (read_committed, from the start
of the output topic), the LSO sampler of the output topic, the checkpoint's offset and commit logs, the
Spark app and the cluster. It opens no Kafka client of its own: a client whose broker is down costs CPU
(librdkafka reconnects), and a session on 2 cores has none to spare. The view owns no client of its own: any number
of views (or none) cost the system under test nothing, and a view can be opened from any terminal that
sees the results directory.

Snapshot (all times epoch s, durations s, counts in records)::

    {"t", "up_s",
     "input":  {"acked", "info", "fail", "rate_per_s"},           # the workload's sends
     "output": {"seen", "rate_per_s", "rereads"},                 # the live reader, distinct positions
     "lag":    {"records", "batch"},       # Σ input end acked − the last committed batch's end offsets
     "batch":  {"id", "duration_s", "age_s", "planned"},          # offsets/N → commits/N
     "partitions": [{"partition", "lso", "hw", "open": hw − lso, "sampled_s"}],   # the output topic
     "open_transactions",                  # partitions whose LSO is below their HW (KIP-98)
     "driver": {"pid", "restarts"}, "executors": [{"id", "pid"}], "executors_lost": [ids],
     "brokers": [{"node", "status"}],
     "faults": [{"f", "age_s", "for_s"}],
     "anomalies": {"live-duplicate", "live-aborted-read"}}

Rates are over the last :data:`RATE_WINDOW_S` seconds. A value that could not be read (a broker down, the
samplers cut off by a fault) is ``null``, never a stale number passed off as new.
"""

from __future__ import annotations

import collections
import json
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from onceproof.backends.base import ExecutorFaults
from onceproof.checkers import transactions
from onceproof.store import checkpoint, readers

RATE_WINDOW_S = 5.0
"""The window of the input and output rates (s)."""
EXECUTORS_EVERY_S = 2.0
"""How often the executors are listed (s): the backend walks processes for them."""
SINK_LOG_EVERY_S = 5.0
"""How often the sink's log is re-read for the attempts known aborted (s)."""


class Rate:
    """Records per second of a growing count over the last ``window_s`` seconds."""

    def __init__(self, window_s: float = RATE_WINDOW_S):
        self.window_s = window_s
        self._points: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, t: float, count: int) -> float | None:
        """Record ``count`` at time ``t`` (s); the rate since the oldest point in the window, ``None``
        until two points exist."""
        self._points.append((t, count))
        while len(self._points) > 2 and self._points[1][0] <= t - self.window_s:
            self._points.popleft()
        (t0, c0), (t1, c1) = self._points[0], self._points[-1]
        return round((c1 - c0) / (t1 - t0), 1) if t1 > t0 else None


class LiveCounts:
    """Running counts of the live reader's view, fed its rows as they arrive (:meth:`add`):

    * ``live-duplicate``: input records seen at two or more distinct output positions, told apart by
      their ``op.input`` header when they carry one, else by (key, seq), as
      :func:`onceproof.checkers.transactions.live_view` does after the run;
    * ``live-aborted-read``: records of attempts the sink's log shows aborted
      (:func:`onceproof.checkers.transactions.aborted_read_count`).

    Identities and positions are kept as Python hashes (ints) to bound memory (about 100 bytes per
    record: a 30-minute session at 300 records/s holds about 60 MB); a 64-bit collision could hide one
    duplicate from this running count, never from the checker's verdict, which reads every record.
    """

    def __init__(self):
        self.cursor = 0  # rows consumed
        self.records = 0  # distinct output positions
        self.rereads = 0
        self._positions: set[int] = set()
        self._idents: set[int] = set()
        self._dups: set[int] = set()
        self._attempts: Counter[tuple] = Counter()

    @property
    def duplicates(self) -> int:
        return len(self._dups)

    def add(self, rows: list[tuple]) -> None:
        """``rows``: the live reader's ``(partition, offset, key bytes|str|None, value bytes, seen_ms,
        headers)`` in arrival order."""
        for p, o, k, v, _seen, hdrs in rows:
            self.cursor += 1
            pos = hash((p, o))
            if pos in self._positions:
                self.rereads += 1  # the reader got the same record again: not a copy
                continue
            self._positions.add(pos)
            self.records += 1
            h = {hk: hv.decode() if isinstance(hv, bytes) else hv for hk, hv in hdrs or []}
            try:
                d = json.loads(v)
            except (TypeError, ValueError):
                d = {}
            if not isinstance(d, dict):
                d = {}
            seq = d.get("seq")
            if seq is not None:
                key = d.get("key", k.decode() if isinstance(k, bytes) else k)
                ident = hash((key, h.get("op.input") or f"seq:{seq}"))
                if ident in self._idents:
                    self._dups.add(ident)
                else:
                    self._idents.add(ident)
            if "op.batch" in h:
                self._attempts[(h.get("op.incarnation"), h["op.batch"], h.get("op.sink_partition"),
                                h.get("op.attempt"))] += 1

    def attempts(self) -> pd.DataFrame:
        """One row per sink attempt seen: ``op.incarnation`` (when any record carried one), ``op.batch``,
        ``op.sink_partition``, ``op.attempt``, ``n`` (records)."""
        rows = [(*k, n) for k, n in self._attempts.items()]
        df = pd.DataFrame(rows, columns=["op.incarnation", "op.batch", "op.sink_partition", "op.attempt", "n"])
        return df.drop(columns=["op.incarnation"]) if df["op.incarnation"].isna().all() else df

    def aborted_reads(self, sink_log: pd.DataFrame | None) -> int:
        """Records seen so far of the attempts ``sink_log`` shows aborted."""
        if not self._attempts or sink_log is None or sink_log.empty:
            return 0
        return transactions.aborted_read_count(self.attempts(), sink_log)


class LiveStatus:
    """Builds and writes the snapshot (module docstring) of the running session ``r`` (the runner's run
    state, after ``runner.start_services``) and its manual nemesis ``nem`` to ``path`` on each
    :meth:`tick`."""

    def __init__(self, r, nem, path: Path, input_topic: str, clock=time.time):
        self.r, self.nem, self.path, self.input_topic = r, nem, Path(path), input_topic
        self.clock = clock
        self.started = clock()
        self.counts = LiveCounts()
        self._in_rate, self._out_rate = Rate(), Rate()
        self._executors: list[dict] = []
        self._executor_ids: set[str] = set()
        self._next_executors = 0.0
        self._aborted = 0
        self._next_sink_log = 0.0

    def _executors_now(self, now: float) -> None:
        spark = self.r.spark
        if now < self._next_executors or not isinstance(spark, ExecutorFaults):
            return
        self._next_executors = now + EXECUTORS_EVERY_S
        try:
            ex = spark.executors()
        except Exception:  # noqa: BLE001 - a listing between incarnations; shown as the last one
            return
        self._executors = [{"id": e.id, "pid": e.pid} for e in ex]
        self._executor_ids |= {e.id for e in ex}

    def _aborted_now(self, now: float) -> int:
        if now >= self._next_sink_log:
            self._next_sink_log = now + SINK_LOG_EVERY_S
            log = pd.DataFrame.from_records(readers.read_sink(self.r.rd.path))
            self._aborted = self.counts.aborted_reads(log)
        return self._aborted

    def _lag(self, n: int | None) -> dict:
        """Records acknowledged to the input that the last committed batch had not reached: per partition
        one past the highest acknowledged offset minus the batch's end offset (a transactional input's
        commit marker takes an offset after its records: ≤ 1 record off per partition, never below 0)."""
        ends = getattr(self.r.workload.stats, "ends", None)
        try:
            done = checkpoint.source_offsets(self.r.ckpt, n).get(self.input_topic, {}) if n is not None else {}
        except (OSError, ValueError):
            done = {}
        if not ends:
            return {"records": None, "batch": n}
        return {"records": int(sum(max(0, e - done.get(p, 0)) for p, e in dict(ends).items())), "batch": n}

    def _batch(self, n: int | None, now: float) -> dict:
        planned = checkpoint.latest_offset_batch(self.r.ckpt)
        if n is None:
            return {"id": None, "duration_s": None, "age_s": None, "planned": planned}
        began, ended = checkpoint.batch_times(self.r.ckpt, n)
        return {"id": n, "planned": planned,
                "duration_s": round(ended - began, 2) if began is not None and ended is not None else None,
                "age_s": round(now - ended, 1) if ended is not None else None}

    def _brokers(self) -> list[dict]:
        out = []
        for node in self.r.cluster.nodes:
            try:
                out.append({"node": node, "status": self.r.cluster.state(node).status})
            except Exception:  # noqa: BLE001 - a node being restarted
                out.append({"node": node, "status": "unknown"})
        return out

    def snapshot(self) -> dict:
        """The snapshot now (module docstring); feeds the live reader's new rows to the running counts."""
        now = self.clock()
        r = self.r
        self.counts.add(r.live.rows_since(self.counts.cursor))
        s = r.workload.stats
        self._executors_now(now)
        committed = checkpoint.latest_commit(r.ckpt)  # the last committed batch, read once for lag and batch
        out_parts = [_partition(p, t, lso, hw, now) for p, (t, lso, hw) in sorted(r.lso.latest().items())]
        return {
            "t": now, "up_s": round(now - self.started, 1),
            "input": {"acked": s.ok, "info": s.info, "fail": s.fail, "rate_per_s": self._in_rate.add(now, s.ok)},
            "output": {"seen": self.counts.records, "rereads": self.counts.rereads,
                       "rate_per_s": self._out_rate.add(now, self.counts.records)},
            "lag": self._lag(committed), "batch": self._batch(committed, now),
            "partitions": out_parts, "open_transactions": sum(1 for p in out_parts if (p["open"] or 0) > 0),
            "driver": {"pid": r.spark.driver_pid, "restarts": r.spark.restarts()},
            "executors": self._executors,
            "executors_lost": sorted(self._executor_ids - {e["id"] for e in self._executors}),
            "brokers": self._brokers(), "faults": self.nem.active(),
            "anomalies": {"live-duplicate": self.counts.duplicates, "live-aborted-read": self._aborted_now(now)},
        }

    def tick(self) -> dict:
        """Build the snapshot and write it atomically to :attr:`path`; returns it."""
        snap = self.snapshot()
        write(self.path, snap)
        return snap


def _partition(p: int, t_ms: int, lso: int, hw: int, now: float) -> dict:
    """One output partition's row; a negative offset (ListOffsets answered no offset: the partition's
    leader is paused or gone) is unknown, ``None``."""
    lso_, hw_ = (lso if lso >= 0 else None), (hw if hw >= 0 else None)
    known = lso_ is not None and hw_ is not None
    return {"partition": p, "lso": lso_, "hw": hw_, "open": hw_ - lso_ if known else None,
            "sampled_s": round(now - t_ms / 1000, 1)}


def write(path: Path, snap: dict) -> None:
    """``snap`` as JSON at ``path``, atomically (a reader never sees half a snapshot)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(snap))
    tmp.replace(path)


def read(path: Path) -> dict:
    """The snapshot at ``path``; ``{}`` when there is none yet."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
