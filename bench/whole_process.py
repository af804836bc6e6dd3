"""Whole-process memory and speed of a check: ``checking.check_live`` end to end on synthetic topics.

``bench/checker_bench.py --whole-process`` runs this module as a child process per size and reports
the child's peak resident set (Linux ``VmHWM``, also ``ru_maxrss`` from ``wait4``) and the analysis
rate. The child goes through the harness's real path, Kafka excepted:

* ``onceproof.clients.topics.read_topic`` for the input (read_committed), the output at read_uncommitted and
  at read_committed, with ``confluent_kafka.Message`` objects served by :class:`FakeConsumer` in
  batches of 10,000 (``consume()`` as ``read_topic`` calls it) and end offsets by
  :func:`fake_end_offsets`. The messages are built a batch at a time from closed-form arithmetic, so
  the feed itself holds O(batch) memory: what is measured is the reader and the checks, not the test
  data;
* ``onceproof.store.readers.read_history`` on a ``history.jsonl`` of two lines per input record (invoke, ok),
  ``sink.jsonl`` and ``nemesis.jsonl`` written into a temporary run directory;
* saving ``input.parquet`` / ``output.parquet`` / ``output_uncommitted.parquet``, then
  ``run_checks`` (the exactly-once checker, the transaction checks, the faults near each example)
  and the history's completeness test.

Planted (and asserted exactly, or the child exits 1): 7 lost records, 12 duplicated pairs with 13
extra copies (2 of them written by an attempt ``sink.jsonl`` shows aborted: 2 aborted reads), one
reordering (nonmonotonic), 2 unexpected seqs and one garbage value (3 unexpected), 3 lost writes,
and one aborted record every :data:`HIDDEN_EVERY` output records that only read_uncommitted sees
(``aborted_hidden``).

Per phase (``read:input``, ``read:uncommitted``, ``read:output``, ``read_history``, ``save``,
``check`` = ``exactly_once.check``, ``compose``, ``nearby``, ...) the child records wall and CPU
seconds and the peak RSS while it was the innermost phase running (``VmHWM``, reset through
``/proc/self/clear_refs`` at every phase boundary; the whole-process peak is the largest of them).

Run it through ``checker_bench.py --whole-process`` (see bench/README.md, how to run it); ``--code-root`` measures
another checkout (e.g. ``main``) on the same feed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

BATCH = 10_000            # messages per consume(), as read_topic asks
HIDDEN_EVERY = 4_999      # an aborted (read_uncommitted-only) record after every this many output records
RECORDS_PER_BATCH = 50_000  # output records per Spark micro-batch (op.batch)
TS0 = 1_795_311_883_494   # epoch ms of the first input record
ABORTED = {"incarnation": "0", "attempt": 7}  # the sink attempt sink.jsonl says aborted


class Feed:
    """The synthetic run: ``n`` input records over ``keys`` keys on ``parts`` partitions, all in closed
    form. Input record ``i``: key ``i % keys``, seq ``i // keys``, partition ``key % parts``, offset
    ``(i // keys) * per_part[partition] + key // parts``, timestamp ``TS0 + i // 1000``."""

    def __init__(self, n: int, keys: int, parts: int, seed: int):
        self.n, self.keys, self.parts = n, keys, parts
        self.per_part = np.bincount(np.arange(keys) % parts, minlength=parts)
        rng = np.random.default_rng(seed)
        mid = rng.choice(np.arange(n // 10, n - n // 10 - keys), size=40, replace=False)
        self.lost = np.sort(mid[:7])
        self.dup1, self.dup_tri, self.dup_more = mid[7:12], mid[12:13], mid[13:19]
        self.swap_a = int(mid[19])
        self.swap_b = self.swap_a + keys  # the same key's next seq
        self.extra = np.concatenate([self.dup1, self.dup_tri, self.dup_tri, self.dup_more])
        self.lost_write_keys = [int(k) % keys for k in mid[20:26]]

    # ---- input
    def input_rows(self, lo: int, hi: int) -> dict:
        i = np.arange(lo, hi, dtype=np.int64)
        k = i % self.keys
        p = k % self.parts
        return {"i": i, "k": k, "seq": i // self.keys, "p": p,
                "o": (i // self.keys) * self.per_part[p] + k // self.parts, "ts": TS0 + i // 1000}

    def input_ends(self) -> dict[int, int]:
        """End offset per input partition (cached)."""
        if not hasattr(self, "_in_ends"):
            ends = np.zeros(self.parts, np.int64)
            for lo in range(0, self.n, 1_000_000):
                ends += np.bincount(self.input_rows(lo, min(self.n, lo + 1_000_000))["p"], minlength=self.parts)
            self._in_ends = {p: int(e) for p, e in enumerate(ends)}
        return dict(self._in_ends)

    # ---- output: pipeline order, with the planted anomalies
    def _sources(self):
        """Chunks of (input index, attempt, aborted-attempt flag) in the order the pipeline wrote them."""
        drop = set(self.lost.tolist())
        for lo in range(0, self.n, BATCH):
            src = np.arange(lo, min(self.n, lo + BATCH), dtype=np.int64)
            src = src[~np.isin(src, self.lost)] if any(lo <= x < lo + BATCH for x in drop) else src
            src = np.where(src == self.swap_a, self.swap_b, np.where(src == self.swap_b, self.swap_a, src))
            yield src, np.zeros(len(src), np.int8), np.zeros(len(src), bool)
        ab = np.isin(self.extra, self.dup_tri)  # the triple's two extra copies: an aborted attempt's
        yield self.extra.astype(np.int64), np.ones(len(self.extra), np.int8), ab

    def extra_batch(self) -> int:
        """The micro-batch that wrote the extra copies: the one after the last regular record's."""
        return (self.n - len(self.lost) - 1) // RECORDS_PER_BATCH + 1

    def output_chunks(self, committed: bool):
        """Per chunk a dict of columns for every output record in offset order per partition; at
        read_uncommitted also the hidden aborted records (flag ``hidden``)."""
        base = np.zeros(self.parts, np.int64)
        j0 = 0
        for src, attempt, aborted in self._sources():
            k = src % self.keys
            inp = {"k": k, "seq": src // self.keys, "p": k % self.parts,
                   "o": (src // self.keys) * self.per_part[k % self.parts] + k // self.parts, "ts": TS0 + src // 1000}
            j = np.arange(j0, j0 + len(src))
            j0 += len(src)
            hid = (j % HIDDEN_EVERY) == HIDDEN_EVERY - 1  # an aborted record right after these
            rep = np.repeat(np.arange(len(src)), 1 + hid)
            hidden = np.zeros(len(rep), bool)
            hidden[np.flatnonzero(np.diff(np.r_[-1, rep]) == 0)] = True
            op = (inp["k"][rep] * 7 + 3) % self.parts
            # offsets per output partition, in order
            order = np.argsort(op, kind="stable")
            counts = np.bincount(op, minlength=self.parts)
            starts = np.cumsum(counts) - counts
            rank = np.empty(len(op), np.int64)
            rank[order] = np.arange(len(op)) - np.repeat(starts, counts)
            oo = base[op] + rank
            base += counts
            r = {"k": inp["k"][rep], "seq": inp["seq"][rep], "in_p": inp["p"][rep], "in_o": inp["o"][rep],
                 "in_ts": inp["ts"][rep], "p": op, "o": oo,
                 "batch": np.where(attempt[rep] > 0, self.extra_batch(), j[rep] // RECORDS_PER_BATCH),
                 "attempt": np.where(hidden, 9, attempt[rep]), "aborted": aborted[rep], "hidden": hidden}
            if committed:
                keep = ~hidden
                r = {c: v[keep] for c, v in r.items()}
            yield r
        # unexpected: two seqs never sent, one garbage value; at the end of partitions 0 and 1
        yield {"k": np.array([self.lost_write_keys[0], self.lost_write_keys[1], 0]),
               "seq": np.array([10**9, 10**9 + 1, -1]), "in_p": np.zeros(3, np.int64),
               "in_o": np.full(3, -1), "in_ts": np.zeros(3, np.int64),
               "p": np.array([0, 1, 1]), "o": np.array([base[0], base[1], base[1] + 1]),
               "batch": np.full(3, self.extra_batch()), "attempt": np.zeros(3, np.int8),
               "aborted": np.zeros(3, bool), "hidden": np.zeros(3, bool)}

    def output_ends(self) -> dict[int, int]:
        """End offset per output partition (the aborted records included), and the hidden count: cached."""
        if not hasattr(self, "_out_ends"):
            ends, hidden = np.zeros(self.parts, np.int64), 0
            for r in self.output_chunks(committed=False):
                np.maximum.at(ends, r["p"], r["o"] + 1)
                hidden += int(r["hidden"].sum())
            self._out_ends, self._hidden = {p: int(e) for p, e in enumerate(ends)}, hidden
        return dict(self._out_ends)

    def hidden_count(self) -> int:
        self.output_ends()
        return self._hidden

    # ---- messages
    def messages(self, topic: str, committed: bool):
        """Batches of ``confluent_kafka.Message`` as ``consume()`` returns them; the last batch is []."""
        from confluent_kafka import Message

        kb = [f"k{k}".encode() for k in range(self.keys)]
        if topic == "input":
            for lo in range(0, self.n, BATCH):
                r = self.input_rows(lo, min(self.n, lo + BATCH))
                yield [Message(topic=topic, partition=p, offset=o, key=kb[k], timestamp=(1, ts),
                               value=b'{"key":"k%d","seq":%d,"t":%d}' % (k, s, ts))
                       for k, s, p, o, ts in zip(r["k"].tolist(), r["seq"].tolist(), r["p"].tolist(),
                                                 r["o"].tolist(), r["ts"].tolist())]
            return
        common: dict = {}
        for r in self.output_chunks(committed):
            for lo in range(0, len(r["k"]), BATCH):
                sl = slice(lo, lo + BATCH)
                batch = []
                for k, s, ip, io_, its, p, o, b, a, ab in zip(
                        r["k"][sl].tolist(), r["seq"][sl].tolist(), r["in_p"][sl].tolist(), r["in_o"][sl].tolist(),
                        r["in_ts"][sl].tolist(), r["p"][sl].tolist(), r["o"][sl].tolist(), r["batch"][sl].tolist(),
                        r["attempt"][sl].tolist(), r["aborted"][sl].tolist()):
                    att = ABORTED["attempt"] if ab else a
                    h = common.get((b, p, att, ip))
                    if h is None:
                        h = common[(b, p, att, ip)] = [
                            ("op.incarnation", ABORTED["incarnation"].encode()), ("op.batch", str(b).encode()),
                            ("op.sink_partition", str(p).encode()), ("op.attempt", str(att).encode()),
                            ("op.txn_id", f"onceproof-eos-{ip}".encode()), ("op.sink", b"eos")]
                    value = (b'{"key":"k%d","seq":%d,"in_partition":%d,"in_offset":%d,"in_ts":%d}'
                             % (k, s, ip, io_, its)) if s >= 0 else b"\x00garbage"
                    batch.append(Message(topic=topic, partition=p, offset=o, key=kb[k], value=value,
                                         timestamp=(1, its + 5),
                                         headers=h + [("op.input", b"%d:%d" % (ip, io_))]))
                yield batch

    # ---- run files
    def write_run_files(self, run_dir: Path) -> None:
        """test.json (a run of our workload), history.jsonl (invoke + ok per input record, 3 lost writes,
        2 info and 1 fail sends), sink.jsonl (the aborted attempt, commits), nemesis.jsonl (2 faults)."""
        import pandas as pd

        (run_dir / "test.json").write_text(json.dumps({"kind": "run", "config": {"workload": "keyed"}}))
        t_wall = TS0 / 1000.0
        with open(run_dir / "history.jsonl", "w") as f:
            for lo in range(0, self.n, 500_000):
                r = self.input_rows(lo, min(self.n, lo + 500_000))
                m = len(r["i"])
                idx = np.repeat(r["i"] * 2, 2) + np.tile([0, 1], m)
                ok = np.tile([False, True], m)
                df = pd.DataFrame({"index": idx, "time": idx * 1000, "wall": np.round(t_wall + idx / 2000.0, 3),
                                   "process": 0, "type": np.where(ok, "ok", "invoke"), "f": "send",
                                   "key": np.char.add("k", np.repeat(r["k"], 2).astype(str)),
                                   "seq": np.repeat(r["seq"], 2),
                                   "partition": np.where(ok, np.repeat(r["p"], 2), -1),
                                   "offset": np.where(ok, np.repeat(r["o"], 2), -1)})
                inv = df[~ok].drop(columns=["partition", "offset"])
                body_ok = df[ok].to_json(orient="records", lines=True)
                body_inv = inv.to_json(orient="records", lines=True)
                # interleave invoke and ok lines, as the workload writes them
                f.write("\n".join(a + "\n" + b for a, b in zip(body_inv.splitlines(), body_ok.splitlines())) + "\n")
            # seqs and offsets past the input's (as a real lost write has), not outsized ones: a history
            # column narrows to 32 bits only when every value fits (onceproof.store.columns)
            top = self.n // self.keys + 10
            extra = [("ok", top + i, self.lost_write_keys[i]) for i in range(3)] + \
                [("info", top + 10, self.lost_write_keys[3]), ("info", top + 11, self.lost_write_keys[4]),
                 ("fail", top + 12, self.lost_write_keys[5])]
            for j, (t, s, k) in enumerate(extra):
                op = {"index": 2 * self.n + j, "time": 0, "wall": t_wall, "process": 0, "type": t, "f": "send",
                      "key": f"k{k}", "seq": s}
                op.update({"partition": 0, "offset": self.input_ends()[0] + j} if t == "ok" else {"error": "boom"})
                f.write(json.dumps(op) + "\n")
        b_ab = self.extra_batch()
        events = [{"time": t_wall, "event": "abort", "incarnation": ABORTED["incarnation"], "batch": b_ab,
                   "partition": p, "attempt": ABORTED["attempt"], "txn_id": f"onceproof-eos-{p}",
                   "error": "planted"} for p in range(self.parts)]
        events += [{"time": t_wall, "event": "commit", "incarnation": "0", "batch": b, "partition": p, "attempt": 0}
                   for b in range(3) for p in range(self.parts)]
        (run_dir / "sink.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        span = self.n / 1000.0 / 1000.0  # seconds of input timestamps
        nem = []
        for i, (f, at) in enumerate((("kill-executor", 0.3), ("kill-driver-in-commit-window", 0.6))):
            w = t_wall + span * at
            nem.append({"index": 2 * i, "type": "invoke", "f": f, "wall": w, "time": 0})
            nem.append({"index": 2 * i + 1, "type": "info", "f": f, "wall": w + 1, "time": 0,
                        "outcome": "effective", "target": "x"})
        (run_dir / "nemesis.jsonl").write_text("".join(json.dumps(e) + "\n" for e in nem))

    def expected(self) -> dict:
        return {"duplicate": 12, "duplicate-records": 13, "lost": 7, "unexpected": 3, "nonmonotonic": 1,
                "lost-write": 3, "failed-write-visible": 0, "input-duplicate": 0, "input-duplicate-records": 0,
                "aborted-read": 2, "stuck": 0}


# ----------------------------------------------------------------------------------------------------
# Kafka stand-ins

FEED: Feed | None = None


def fake_end_offsets(bootstrap: str, topic: str, committed: bool) -> dict[int, int]:
    """``topics.end_offsets`` of the synthetic topics (the LSO equals the high watermark: recovered)."""
    return FEED.input_ends() if topic == "input" else FEED.output_ends()


class FakeConsumer:
    """What ``topics.read_topic`` uses of ``confluent_kafka.Consumer``, serving :class:`Feed` messages."""

    def __init__(self, conf: dict):
        self.committed = conf.get("isolation.level") == "read_committed"
        self.batches = None
        self.pos: dict[int, int] = {}
        self.ends: dict[int, int] = {}

    def assign(self, tps) -> None:
        topic = tps[0].topic
        self.topic = topic
        self.ends = fake_end_offsets("", topic, self.committed)
        self.pos = {tp.partition: 0 for tp in tps}
        self.batches = FEED.messages(topic, self.committed)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list:
        b = next(self.batches, None)
        if b is None:
            self.pos = dict(self.ends)  # read_committed skips the aborted tail: the position says so
            return []
        for m in b[-200:]:
            self.pos[m.partition()] = max(self.pos[m.partition()], m.offset() + 1)
        return b

    def position(self, tps) -> list:
        from confluent_kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, self.pos.get(tp.partition, 0)) for tp in tps]

    def close(self) -> None:
        self.batches = None


# ----------------------------------------------------------------------------------------------------
# phases

def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``); -1 when unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (``/proc/self/clear_refs``, Linux >= 4.0); False when refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Phases:
    """Wall/CPU seconds per phase (inclusive) and peak RSS while each was the innermost one running."""

    def __init__(self):
        self.stack = ["setup"]
        self.data: dict[str, dict] = {}
        self.peak_kb = 0
        self.can_reset = _reset_peak()

    def _close_segment(self) -> None:
        hwm = _status_kb("VmHWM")
        self.peak_kb = max(self.peak_kb, hwm)
        d = self.data.setdefault(self.stack[-1], {"seconds": 0.0, "cpu_seconds": 0.0, "peak_rss_mib": 0.0, "calls": 0})
        d["peak_rss_mib"] = max(d["peak_rss_mib"], round(hwm / 1024, 1))
        if self.can_reset:
            _reset_peak()

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def inner(*a, **kw):
            self._close_segment()
            self.stack.append(name)
            t0, c0 = time.perf_counter(), time.process_time()
            rss0 = _status_kb("VmRSS")
            try:
                return fn(*a, **kw)
            finally:
                self._close_segment()
                self.stack.pop()
                d = self.data[name]
                d["seconds"] = round(d["seconds"] + time.perf_counter() - t0, 3)
                d["cpu_seconds"] = round(d["cpu_seconds"] + time.process_time() - c0, 3)
                d["calls"] += 1
                d["rss_at_start_mib"] = round(rss0 / 1024, 1)
                d["rss_at_end_mib"] = round(_status_kb("VmRSS") / 1024, 1)
        return inner


def child(a) -> int:
    global FEED
    sys.path.insert(0, str(import_root(a.code_root)))
    import onceproof.checkers.compose as compose
    import onceproof.checkers.exactly_once as exactly_once
    import onceproof.checkers.nearby as nearby
    import onceproof.checkers.transactions as transactions
    from onceproof.checking import checks as checking
    from onceproof.checking.recovery import RecoveryStatus
    from onceproof.clients import topics
    from onceproof.store import readers

    FEED = Feed(a.records, a.keys, a.partitions, a.seed)
    hidden = FEED.hidden_count()
    ph = Phases()
    run_dir = Path(a.run_dir)

    topics.end_offsets = fake_end_offsets
    topics.Consumer = FakeConsumer
    real_read = topics.read_topic

    def read_topic(bootstrap, topic, committed=True, *args, **kw):
        name = "read:input" if topic == "input" else "read:output" if committed else "read:uncommitted"
        return ph.wrap(name, real_read)(bootstrap, topic, committed, *args, **kw)

    topics.read_topic = read_topic
    readers.read_history = ph.wrap("read_history", readers.read_history)
    for name in ("save_snapshots", "_save"):
        if hasattr(checking, name):
            setattr(checking, name, ph.wrap("save", getattr(checking, name)))
    checking.run_checks = ph.wrap("run_checks", checking.run_checks)
    checking.history_gaps = ph.wrap("history_gaps", checking.history_gaps)
    real_check = exactly_once.check

    def check_with_sizes(history, input, output, *args, **kw):
        """Record what is resident when the check starts: the frames' own memory, pyarrow's pool."""
        import pyarrow as pa

        ph.data["frames_at_check_mib"] = {n: round(float(f.memory_usage(deep=True, index=False).sum()) / 2**20, 1)
                                          for n, f in (("history", history), ("input", input), ("output", output))}
        ph.data["columns_at_check_mib"] = {  # per column: [dtype, MiB]
            n: {c: [str(f[c].dtype), round(float(f[c].memory_usage(deep=True, index=False)) / 2**20, 1)]
                for c in f.columns}
            for n, f in (("history", history), ("input", input), ("output", output))}
        ph.data["pyarrow_allocated_at_check_mib"] = round(pa.total_allocated_bytes() / 2**20, 1)
        if not a.line_profile:
            return real_check(history, input, output, *args, **kw)
        lines: dict = {}
        state = {"line": None, "base": _status_kb("VmRSS")}

        def tracer(frame, event, arg):  # peak RSS per line of checkers/exactly_once.py (VmHWM reset per line)
            if frame.f_code.co_filename != exactly_once.__file__:
                return tracer
            if event in ("line", "return"):
                if state["line"] is not None:
                    lines[state["line"]] = max(lines.get(state["line"], 0), _status_kb("VmHWM") - state["base"])
                _reset_peak()
                state["line"] = f"{frame.f_code.co_name}:{frame.f_lineno}" if event == "line" else None
            return tracer

        sys.settrace(tracer)
        try:
            return real_check(history, input, output, *args, **kw)
        finally:
            sys.settrace(None)
            ph.data["check_lines_peak_above_start_mib"] = {
                k: round(v / 1024, 1) for k, v in sorted(lines.items(), key=lambda kv: -kv[1])[:40]}
            ph.data["check_lines_in_order_mib"] = {k: round(v / 1024, 1) for k, v in lines.items()}

    exactly_once.check = ph.wrap("check", check_with_sizes)
    compose.combine = ph.wrap("compose", compose.combine)
    transactions.hidden_aborted = ph.wrap("hidden_aborted", transactions.hidden_aborted)
    nearby.attach = ph.wrap("nearby", nearby.attach)
    if hasattr(checking, "nearby"):
        checking.nearby = nearby
    ends = fake_end_offsets("", "output", True)
    st = RecoveryStatus(finished=True, input_end=fake_end_offsets("", "input", True), output_lso=ends,
                        output_hw=ends)
    rss_before = _status_kb("VmRSS")
    t0 = time.perf_counter()
    c0 = time.process_time()
    result = ph.wrap("check_live", checking.check_live)("fake:9092", "input", "output", run_dir, st,
                                                        workload="keyed")
    total_s, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    ph._close_segment()
    got = {k: result["counts"].get(k) for k in FEED.expected()}
    ok = got == FEED.expected() and result["stats"].get("aborted_hidden") == hidden
    n_out = result["stats"]["output_records"]
    chk = ph.data["check"]
    analysis = {k: ph.data[k]["seconds"] for k in ("check", "compose", "nearby", "history_gaps") if k in ph.data}
    analysis_s = sum(analysis.values())
    report = {
        "records": a.records, "output_records": n_out, "keys": a.keys, "code_root": a.code_root,
        "imported": str(Path(exactly_once.__file__).resolve()),
        "verdict": result["verdict"], "counts_ok": ok, "counts": got,
        "aborted_hidden": result["stats"].get("aborted_hidden"),
        "hidden_planted": hidden,
        "peak_rss_mib": round(max(ph.peak_kb, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024, 1),
        "rss_before_check_live_mib": round(rss_before / 1024, 1),
        "check_live_seconds": round(total_s, 2), "check_live_cpu_seconds": round(total_cpu, 2),
        "analysis_seconds": round(analysis_s, 3), "analysis_parts": analysis,
        "analysis_records_per_s": round(n_out / analysis_s) if analysis_s else None,
        "check_records_per_s": round(n_out / chk["seconds"]) if chk["seconds"] else None,
        "phases": ph.data, "loadavg": os.getloadavg(),
    }
    Path(a.out).write_text(json.dumps(report, indent=2, default=str))
    if not ok:
        print(f"whole-process check found {got} (aborted_hidden {result['stats'].get('aborted_hidden')}), "
              f"planted {FEED.expected()} (hidden {hidden})", file=sys.stderr)
        return 1
    return 0


def import_root(code_root: str) -> Path:
    """Where ``code_root``'s ``onceproof`` package is imported from: its ``src/`` in a checkout (the
    package's layout), else ``code_root`` itself. Without this, a checkout given as ``--code-root`` is not
    on the path as a package root and the virtualenv's own install is measured instead."""
    root = Path(code_root)
    return root / "src" if (root / "src" / "onceproof").is_dir() else root


def run(records: int, keys: int, partitions: int, seed: int, code_root: str, rss_limit_mib: float,
        tmp: str | None = None, line_profile: bool = False) -> dict:
    """Write the run files (in a helper process, so that their making is not in the measured peak), run
    one child on them and return its report plus ``ru_maxrss_mib`` (``wait4``'s peak of the child's
    whole life), ``exit`` and ``generate_files_seconds``; a child killed for passing ``rss_limit_mib``
    (psutil samples its RSS every 0.2 s) reports ``killed_at_mib``."""
    import shutil
    import subprocess

    import psutil

    work = Path(tempfile.mkdtemp(prefix="onceproof-wholeproc-", dir=tmp))
    try:
        run_dir = work / "run"
        run_dir.mkdir()
        out = work / "report.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--records", str(records), "--keys",
               str(keys), "--partitions", str(partitions), "--seed", str(seed), "--code-root", code_root,
               "--out", str(out), "--run-dir", str(run_dir)]
        # the files are written by a process of their own: a child's ru_maxrss starts at its parent's
        # resident size (exec records the size of the address space it replaces), so the parent stays small
        t0 = time.perf_counter()
        env = dict(os.environ, PYTHONPATH=str(import_root(code_root)))
        subprocess.run([*cmd, "--write-files"], check=True, env=env)
        gen_s = time.perf_counter() - t0
        cmd.append("--child")
        if line_profile:
            cmd.append("--line-profile")
        p = subprocess.Popen(cmd, env=env)
        proc = psutil.Process(p.pid)
        killed = None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            try:
                rss = proc.memory_info().rss / 2**20
            except psutil.Error:
                rss = 0
            if rss > rss_limit_mib and killed is None:
                killed = round(rss, 1)
                p.kill()
            time.sleep(0.2)
        p.returncode = os.waitstatus_to_exitcode(status)
        try:
            rep = json.loads(out.read_text())
        except (OSError, ValueError):
            rep = {"records": records, "code_root": code_root}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rep.update(exit=p.returncode, ru_maxrss_mib=round(ru.ru_maxrss / 1024, 1), generate_files_seconds=round(gen_s, 1))
    if killed is not None:
        rep["killed_at_mib"] = killed
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--code-root", default=str(ROOT))
    ap.add_argument("--out", default="/dev/stdout")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--run-dir", help="(child) the run directory the parent wrote")
    ap.add_argument("--write-files", action="store_true", help="(helper) write the run files into --run-dir")
    ap.add_argument("--line-profile", action="store_true",
                    help="(child) peak RSS per line of exactly_once.check (slow: a trace function)")
    a = ap.parse_args(argv)
    if a.write_files:
        Feed(a.records, a.keys, a.partitions, a.seed).write_run_files(Path(a.run_dir))
        return 0
    if a.child:
        return child(a)
    rep = run(a.records, a.keys, a.partitions, a.seed, a.code_root, 6144, a.tmp, a.line_profile)
    print(json.dumps(rep, indent=2))
    return rep["exit"]


if __name__ == "__main__":
    sys.exit(main())
