"""Benchmark of the pipeline itself: the eos sink against Spark's own (at-least-once) Kafka sink, the
steady-state visibility latency, and the machine's physical limit (issue 11, item 1).

Run from the repo root (``make bench-pipeline``)::

    .venv/bin/python bench/pipeline_bench.py --json bench/pipeline.json

Phases, one after another on this machine (each a real ``onceproof run`` with ``--nemesis none``: its own
KRaft cluster and Spark ``local-cluster``; the run's stored ``output.parquet`` carries, per output
record, its append time ``timestamp`` and its input record's append time ``in_ts``, both ms; a table
sink's record is timed at its commit instead, see :func:`_output`). ``--sinks`` names the sinks each
phase runs (default ``eos,at-least-once``; the table sinks ``delta``, ``delta-foreachbatch``,
``iceberg``, ``iceberg-foreachbatch`` and ``postgres`` too, each also reported as a ratio to eos's throughput):

1. **saturate** ``eos`` and ``at-least-once``: ``--rate`` (default 8,000 records/s) offered for
   ``--saturate-s`` (60 s) with ``maxOffsetsPerTrigger`` lifted (``--max-offsets`` 1,000,000, so the
   at-least-once sink is no longer capped at 5,000 per 1 s trigger). Throughput = the median of the
   per-second output counts over the steady part: from 10 s after the first output record to the last
   input record (the input backlog is non-empty there when the pipeline is saturated; ``saturated``
   says whether the backlog grew, i.e. output < offered).
2. **latency** ``eos`` and ``at-least-once`` at 300 records/s for ``--latency-s`` (90 s): visibility
   latency = output append time − input append time, over input records appended ≥ ``--warmup-s``
   (20 s) after the first output record (the start-up backlog is excluded: it measures Spark's start,
   not the sink); p50/p99/max in seconds.
3. **raw**: the physical limit: ``onceproof cluster up`` (3 brokers, like a run), one idempotent
   confluent-kafka producer (acks=all) writes ``--raw-records`` (300,000) 60-byte records to a
   6-partition topic, and a read_committed consumer reads them back; records/s of each and of the
   pair (produce + consume time).

Output: a table and, with ``--json FILE``, ``{"eos_over_alo_throughput": r, "phases": {...},
"latency": {...}, "raw": {...}, "targets": {...}}``. Exit 0 always after a complete measurement (the
targets are reported, not asserted: a benchmark measures); 1 when a phase's run failed to produce
output. Why our own script rather than a benchmark framework: each phase is a whole cluster run of
minutes, timed from the broker's own append timestamps, which no generic timer sees.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
ONCEPROOF = [sys.executable, "-m", "onceproof.harness.cli"]


def _run(args: list[str], results: Path, name: str, timeout_s: float) -> Path:
    """One ``onceproof run`` → its run directory (``results/<name>/<timestamp>/``).

    Raises: ``RuntimeError`` when the run crashed (exit 255) or stored no ``output.parquet``."""
    argv = [*ONCEPROOF, "run", *args, "--nemesis", "none", "--test-name", name, "--results", str(results),
            "--keep-last", "1"]
    t0 = time.monotonic()
    print(f"  $ onceproof {' '.join(argv[3:])}", flush=True)
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    runs = sorted(d for d in (results / name).iterdir() if d.is_dir() and d.name != "latest")
    if p.returncode == 255 or not runs or not (runs[-1] / "output.parquet").exists():
        raise RuntimeError(f"{name}: the run failed (exit {p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    print(f"    exit {p.returncode} in {time.monotonic() - t0:.0f}s → {runs[-1]}", flush=True)
    return runs[-1]


def throughput(out: pd.DataFrame, inp: pd.DataFrame, offered: float) -> dict:
    """Sustained output records/s of one run (``output.parquet``: ``timestamp`` = output append time or commit time,
    ``in_ts`` = its input's append time; ``input.parquet``: ``timestamp``; all ms).

    A transactional sink writes a micro-batch's records in one burst, so per-second counts are mostly 0
    or tens of thousands: the rate is measured over a window instead. Window: from 10 s after the first
    output record to the moment the output caught up with the input (the last output record whose input
    was appended while the backlog was still growing), i.e. while a backlog existed. Returns
    ``{"records_per_s", "window_s", "input_per_s" (the load actually offered), "offered_per_s" (asked),
    "peak_backlog" (records), "saturated"}``: ``saturated`` is False when the pipeline kept up (the
    backlog never exceeded 2 s of input), and then ``records_per_s`` is only a lower bound;
    ``commits`` (distinct visibility times) and ``between_commits_per_s`` (the records of every commit after
    the first over the first-to-last commit time) for a sink whose few large commits leave the window
    shorter than 5 s (``records_per_s`` NaN)."""
    o = np.sort(out["timestamp"].to_numpy())
    i = np.sort(inp["timestamp"].to_numpy())
    t0 = o[0] + 10_000
    in_rate = len(i) / max(1e-3, (i[-1] - i[0]) / 1000)
    # backlog at each output record's time: input appended by then − output appended by then
    backlog = np.searchsorted(i, o, side="right") - np.arange(1, len(o) + 1)
    steady = o >= t0
    peak = int(backlog[steady].max()) if steady.any() else 0
    # the window ends at the last output record before the backlog drained for good (≤ 1 s of input)
    drained = np.nonzero(steady & (backlog > max(1.0, in_rate)))[0]
    t1 = o[drained[-1]] if len(drained) else o[-1]
    n = int(((o > t0) & (o <= t1)).sum())  # (t0, t1]: a burst at t0 belongs to the time before it
    window_s = (t1 - t0) / 1000
    rate = n / window_s if window_s >= 5 else float("nan")
    # a sink whose commits are few and large (a Delta table: one commit per micro-batch of 100k+ records)
    # gives too short a window: the rate between its commits instead, the records of every commit after
    # the first over the time from the first commit to the last
    commits = np.unique(o)
    between = (len(o) - int((o == commits[0]).sum())) / ((commits[-1] - commits[0]) / 1000) \
        if len(commits) > 1 else float("nan")
    return {"records_per_s": round(float(rate), 1), "window_s": round(float(window_s), 1),
            "commits": int(len(commits)), "between_commits_per_s": round(float(between), 1),
            "input_per_s": round(float(in_rate), 1),
            "offered_per_s": offered, "peak_backlog": peak, "saturated": bool(peak > 2 * in_rate)}


def latency(out: pd.DataFrame, warmup_s: float) -> dict:
    """Visibility latency (output append − input append, s) of input records appended ≥ ``warmup_s``
    after the first output record. Returns ``{"p50_s", "p99_s", "max_s", "records"}``."""
    t0 = out["timestamp"].min() + warmup_s * 1000
    lat = (out.loc[out["in_ts"] >= t0, "timestamp"] - out.loc[out["in_ts"] >= t0, "in_ts"]) / 1000.0
    if lat.empty:
        return {"p50_s": float("nan"), "p99_s": float("nan"), "max_s": float("nan"), "records": 0}
    return {"p50_s": round(float(lat.quantile(0.5)), 3), "p99_s": round(float(lat.quantile(0.99)), 3),
            "max_s": round(float(lat.max()), 3), "records": int(len(lat))}


def _output(run_dir: Path) -> pd.DataFrame:
    """Each output record's visibility time ``timestamp`` and its input's append time ``in_ts`` (ms).

    A topic's record: its append time (``output.parquet``). A Delta table's row: the modification time of
    the ``_delta_log/<version>.json`` that added its file (the commit is visible once that file exists;
    ``delta_table.added_in``). An Iceberg table's row: the modification time of the first
    ``metadata/v<N>.metadata.json`` whose current snapshot holds its file (the Hadoop catalog's commit is
    that file's rename). A PostgreSQL row: the time of its batch's ``commit`` event in
    ``sink.jsonl`` (logged when the database's ``COMMIT`` returned), joined on (incarnation, batchId).
    Raises ``RuntimeError`` when a table sink's run has none of these."""
    cols = pd.read_parquet(run_dir / "output.parquet").columns
    if "timestamp" in cols:
        return pd.read_parquet(run_dir / "output.parquet", columns=["timestamp", "in_ts"])
    table = run_dir / "delta-table"
    if (table / "_delta_log").is_dir():
        return _delta_visible(table)
    if (run_dir / "iceberg-warehouse").is_dir():
        return _iceberg_visible(run_dir / "iceberg-warehouse")
    if {"op.batch", "op.incarnation", "in_ts"} <= set(cols) and (run_dir / "sink.jsonl").exists():
        return _commit_event_visible(run_dir)
    raise RuntimeError(f"{run_dir}: no way to time this output's visibility (no timestamp, Delta log or commit events)")


def _delta_visible(table: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from onceproof.sinks.delta_table import added_in

    version = DeltaTable(str(table)).version()
    parts = []
    for f, v in added_in(table, version).items():
        if not (table / f).exists():
            continue
        mtime_ms = (table / "_delta_log" / f"{v:020d}.json").stat().st_mtime_ns // 1_000_000
        in_ts = pq.read_table(table / f, columns=["in_ts"])["in_ts"].to_numpy()
        parts.append(pd.DataFrame({"timestamp": np.full(len(in_ts), mtime_ms, dtype=np.int64), "in_ts": in_ts}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"timestamp": [], "in_ts": []})


def _iceberg_visible(warehouse: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq
    from pyiceberg.table import StaticTable

    from onceproof.sinks.iceberg_table import (
        METADATA,
        current_metadata,
        live_entries,
        local_path,
        metadata_versions,
        table_dir,
    )

    meta = table_dir(warehouse) / METADATA
    became_current: dict[int, int] = {}  # snapshot id -> ms of the first metadata file naming it current
    for v in metadata_versions(warehouse):
        f = meta / f"v{v}.metadata.json"
        snap = StaticTable.from_metadata(str(f)).current_snapshot()
        if snap is not None:
            became_current.setdefault(snap.snapshot_id, f.stat().st_mtime_ns // 1_000_000)
    parts = []
    for path, snap_id in live_entries(StaticTable.from_metadata(str(current_metadata(warehouse)))):
        in_ts = pq.read_table(local_path(path), columns=["in_ts"])["in_ts"].to_numpy()
        parts.append(pd.DataFrame({"timestamp": np.full(len(in_ts), became_current[snap_id], dtype=np.int64),
                                   "in_ts": in_ts}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"timestamp": [], "in_ts": []})


def _commit_event_visible(run_dir: Path) -> pd.DataFrame:
    events = [json.loads(line) for line in (run_dir / "sink.jsonl").read_text().splitlines() if line.strip()]
    commits = pd.DataFrame([{"op.incarnation": str(e.get("incarnation")), "op.batch": str(e.get("batch")),
                             "timestamp": int(float(e["time"]) * 1000)}
                            for e in events if e.get("event") == "commit" and "batch" in e])
    out = pd.read_parquet(run_dir / "output.parquet", columns=["op.batch", "op.incarnation", "in_ts"])
    out = out.astype({"op.batch": str, "op.incarnation": str})
    joined = out.merge(commits.drop_duplicates(["op.incarnation", "op.batch"]), how="inner")
    if len(joined) < len(out):
        print(f"    {len(out) - len(joined)} rows of {run_dir.name} have no commit event; left out", flush=True)
    return joined[["timestamp", "in_ts"]].astype("int64")


def _input(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "input.parquet", columns=["timestamp"])


def raw_limit(records: int, work: Path) -> dict:
    """The physical limit: produce ``records`` with one idempotent producer (acks=all), then read them
    back at read_committed, on a fresh ``onceproof cluster up``. Returns records/s of each and the pair."""
    from confluent_kafka import Consumer, Producer

    from onceproof.clients import topics

    with cluster(work / "raw-cluster") as bootstrap:
        topics.create_topics(bootstrap, {"raw": 6}, replication=3)
        value = b'{"key":"k1234","seq":123456,"t":1795432879269,"pad":"xx"}'
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
        t0 = time.monotonic()
        for i in range(records):
            while True:
                try:
                    p.produce("raw", key=f"k{i % 10000}".encode(), value=value)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 10000 == 0:
                p.poll(0)
        if p.flush(120) != 0:
            raise RuntimeError("raw produce: records still unacknowledged after 120 s")
        produce_s = time.monotonic() - t0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw-bench", "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["raw"])
        n, t0 = 0, time.monotonic()
        deadline = t0 + 300
        while n < records and time.monotonic() < deadline:
            n += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
        consume_s = time.monotonic() - t0
        c.close()
        return {"records": records, "consumed": n, "produce_s": round(produce_s, 2), "consume_s": round(consume_s, 2),
                "produce_per_s": round(records / produce_s), "consume_per_s": round(n / consume_s),
                "pair_per_s": round(records / (produce_s + consume_s))}


@contextlib.contextmanager
def cluster(cdir: Path):
    """A fresh ``onceproof cluster up --dir cdir`` (3 KRaft brokers); yields its bootstrap servers and
    brings it down on every exit. Raises ``RuntimeError`` with the command's output when it fails."""
    up = subprocess.run([*ONCEPROOF, "cluster", "up", "--dir", str(cdir)], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
    try:
        if up.returncode != 0:
            raise RuntimeError(f"cluster up failed: {up.stdout[-1500:]}{up.stderr[-1500:]}")
        yield up.stdout.strip().splitlines()[-1].split()[-1]
    finally:
        subprocess.run([*ONCEPROOF, "cluster", "down", "--dir", str(cdir)], cwd=ROOT, capture_output=True,
                       timeout=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the numbers here")
    ap.add_argument("--rate", type=float, default=8000.0, help="offered load of the saturate phase, records/s")
    ap.add_argument("--saturate-s", type=float, default=60.0)
    ap.add_argument("--latency-s", type=float, default=90.0)
    ap.add_argument("--warmup-s", type=float, default=20.0)
    ap.add_argument("--max-offsets", type=int, default=1_000_000, help="maxOffsetsPerTrigger of every phase")
    ap.add_argument("--raw-records", type=int, default=300_000)
    ap.add_argument("--sinks", default="eos,at-least-once")
    ap.add_argument("--phases", default="saturate,latency,raw")
    ap.add_argument("--keep", type=Path, default=ROOT / "results" / "bench-pipeline",
                    help="the phases' run directories go under KEEP/<timestamp>/")
    a = ap.parse_args(argv)
    phases = set(a.phases.split(","))
    sinks = a.sinks.split(",")
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "load_avg_at_start": os.getloadavg()},
                 "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                 "phases": {}, "latency": {}}
    work = a.keep / time.strftime("%Y%m%dT%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    print(f"runs kept under {work}", flush=True)
    try:
        if "saturate" in phases:
            for s in sinks:
                print(f"saturate {s}: {a.rate:.0f} records/s for {a.saturate_s:.0f}s", flush=True)
                rd = _run(["--sink", s, "--rate", str(a.rate), "--time-limit", str(a.saturate_s),
                           "--max-offsets", str(a.max_offsets)], work, f"saturate-{s}", 1800)
                out["phases"][s] = (throughput(_output(rd), _input(rd), a.rate)
                                    | {"sink_init_ms": _init_ms(rd), "run": str(rd)})
        if "latency" in phases:
            for s in sinks:
                print(f"latency {s}: 300 records/s for {a.latency_s:.0f}s", flush=True)
                rd = _run(["--sink", s, "--rate", "300", "--time-limit", str(a.latency_s),
                           "--max-offsets", str(a.max_offsets)], work, f"latency-{s}", 1800)
                out["latency"][s] = latency(_output(rd), a.warmup_s) | {"run": str(rd)}
        if "raw" in phases:
            print(f"raw: {a.raw_records} records produced and read at read_committed", flush=True)
            out["raw"] = raw_limit(a.raw_records, work)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    eos, alo = out["phases"].get("eos", {}), out["phases"].get("at-least-once", {})
    for s in sinks:
        if s != "eos" and eos and s in out["phases"]:
            out.setdefault("over_eos_throughput", {})[s] = round(out["phases"][s]["records_per_s"] /
                                                                 eos["records_per_s"], 3)
    if eos and alo:
        out["eos_over_alo_throughput"] = round(eos["records_per_s"] / alo["records_per_s"], 3)
    ratio, p99 = out.get("eos_over_alo_throughput"), out["latency"].get("eos", {}).get("p99_s")
    # None: that phase was not run (--phases), so the target was not measured
    out["targets"] = {"eos_over_alo_throughput >= 0.8": None if ratio is None else ratio >= 0.8,
                      "eos p99 <= 5 s at 300/s": None if p99 is None else p99 <= 5.0}
    _table(out)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
        print(f"wrote {a.json}")
    return 0


def _init_ms(run_dir: Path) -> float | None:
    """Median ``init_ms`` of the eos sink's tasks (``sink.jsonl`` ``begin`` events), ms; None for other sinks."""
    vals = []
    p = run_dir / "sink.jsonl"
    if p.exists():
        for line in p.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if "init_ms" in e:
                vals.append(e["init_ms"])
    return float(np.median(vals)) if vals else None


def _table(out: dict) -> None:
    print("\n| phase | sink | records/s | window s | input offered /s | peak backlog | saturated | sink init ms |")
    print("|---|---|---|---|---|---|---|---|")
    for s, v in out["phases"].items():
        print(f"| saturate | {s} | {v['records_per_s']:.0f} | {v['window_s']} | {v['input_per_s']:.0f} | "
              f"{v['peak_backlog']} | {v['saturated']} | {v.get('sink_init_ms')} |")
    for s, v in out["latency"].items():
        print(f"| latency 300/s | {s} | p50 {v['p50_s']} s, p99 {v['p99_s']} s, max {v['max_s']} s "
              f"({v['records']} records) | | | | | |")
    if "raw" in out:
        r = out["raw"]
        print(f"| raw | confluent-kafka | produce {r['produce_per_s']}, read_committed {r['consume_per_s']}, "
              f"pair {r['pair_per_s']} | | | | | |")
    if "eos_over_alo_throughput" in out:
        print(f"\neos / at-least-once throughput: {out['eos_over_alo_throughput']}")
    print(f"targets: {out['targets']}")


if __name__ == "__main__":
    sys.exit(main())
