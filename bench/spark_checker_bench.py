"""Benchmark of ``onceproof check RUN_DIR --engine spark`` (and ``--engine pandas`` where it fits) on a
synthetic stored run of N records.

Run from the repo root::

    .venv/bin/python bench/spark_checker_bench.py --records 1000000
    .venv/bin/python bench/spark_checker_bench.py --records 50000000 --engines spark \\
        --spark-conf spark.driver.memory=8g

What it does:

1. writes a run directory (``--dir``, default ``/tmp/onceproof-spark-bench/<N>``; reused when it holds a
   complete run of the same shape): ``input.parquet`` and ``output.parquet`` (eos-like: every copy
   carries ``op.input`` and the other provenance headers as strings), ``history.jsonl`` (one ``ok``
   send per input record, ``--history none`` for none), ``recovery.json``, ``test.json``. It is
   written ``--chunk`` records at a time (pyarrow ``ParquetWriter``, pandas ``to_json``), never whole
   in memory: record ``g`` is key ``g mod K``, seq ``g div K``, partition ``key mod P``, and its offset
   follows from those, so each chunk is computed alone;
2. plants anomalies: 7 lost records, 12 duplicated pairs with 13 extra copies (one pair three times),
   one reordering (seqs s and s+1 of a key swapped), 2 pairs not in the input and one value without
   seq (3 unexpected), 3 acknowledged sends missing from the input (lost-write);
3. runs the real CLI (``python -m onceproof.harness.cli check RUN_DIR --json --engine E``) as a subprocess per
   engine and measures its wall time (JVM start included), the CPU time of the process tree
   and the peak RSS of the whole tree (the CLI, the JVM Spark starts, and anything they start:
   psutil, sampled every 0.2 s, so a peak shorter than that can be missed; the CPU time is each
   process's last sample, so up to 0.2 s per process is missed);
4. fails (exit 1) when an engine does not report exactly the planted anomalies.

The pandas engine runs only up to ``--pandas-max`` records (default 10 M: its frames need about
1 GiB per million records, ``bench/README.md``). Results go to ``--out`` (default
``bench/spark_results.json``) and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_795_311_883_000  # epoch ms of record 0
FAR = 1_000_000_000     # seqs from here on are not in the input

EXPECTED = {"lost": 7, "duplicate": 12, "duplicate-records": 13, "nonmonotonic": 1, "unexpected": 3,
            "lost-write": 3, "failed-write-visible": 0, "input-duplicate": 0, "aborted-read": 0}


# ------------------------------------------------------------------------------------------- the run


class Layout:
    """Where record ``g`` (0 ≤ g < n) lives: key ``g % keys``, seq ``g // keys``, partition
    ``key % parts``, offset = earlier full seq rounds × the partition's keys + the key's rank in it."""

    def __init__(self, n: int, keys: int, parts: int):
        self.n, self.keys, self.parts = n, keys, parts
        self.keys_in = np.array([(keys - p + parts - 1) // parts for p in range(parts)], np.int64)
        per_key = np.full(keys, n // keys, np.int64)
        per_key[: n % keys] += 1
        self.size = np.bincount(np.arange(keys) % parts, weights=per_key, minlength=parts).astype(np.int64)

    def at(self, g: np.ndarray):
        k = g % self.keys
        s = g // self.keys
        p = k % self.parts
        return k, s, p, s * self.keys_in[p] + k // self.parts


def plants(lay: Layout) -> dict:
    """The planted anomalies, as record numbers (distinct keys, from the run's middle)."""
    n, K = lay.n, lay.keys
    mid = (n // 2) // K * K  # start of a seq round
    if mid < 2 * K or n - mid < 4 * K:
        raise SystemExit(f"--records must be at least {6 * K} for --keys {K}")
    lost = mid + np.arange(7) * 3
    dups = mid + 100 + np.arange(12) * 3
    swap = (mid + 200, mid + 200 + K)  # seq s and s+1 of one key
    return {"lost": lost, "dups": dups, "triple": dups[0], "swap": swap}


def _keys(k: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar("k"), pc.cast(pa.array(k), pa.string()), "")


def _ref(p: np.ndarray, o: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(pc.cast(pa.array(p), pa.string()), pc.cast(pa.array(o), pa.string()), ":")


def _out_table(k, s, p, o, ts, ref: pa.Array, batch: np.ndarray, attempt: str) -> pa.Table:
    n = len(k)
    ps = pc.cast(pa.array(p), pa.string())
    return pa.table({"key": _keys(k), "seq": pa.array(s, pa.int64()), "partition": pa.array(p, pa.int32()),
                     "offset": pa.array(o, pa.int64()), "timestamp": pa.array(ts + 5, pa.int64()),
                     "op.batch": pc.cast(pa.array(batch), pa.string()), "op.sink_partition": ps,
                     "op.attempt": pa.array([attempt] * n, pa.string()),
                     "op.txn_id": pc.binary_join_element_wise(pa.scalar("s-"), ps, ""),
                     "op.incarnation": pa.array(["1"] * n, pa.string()), "op.input": ref})


def write_run(d: Path, lay: Layout, chunk: int, history: bool) -> None:
    """The run directory (module docstring, step 1-2)."""
    d.mkdir(parents=True, exist_ok=True)
    pl = plants(lay)
    lost = set(pl["lost"].tolist())
    a_, b_ = pl["swap"]
    in_schema = pa.schema([("key", pa.string()), ("seq", pa.int64()), ("partition", pa.int32()),
                           ("offset", pa.int64()), ("timestamp", pa.int64())])
    iw = pq.ParquetWriter(d / "input.parquet", in_schema)
    ow = None
    hist = open(d / "history.jsonl", "w") if history else None
    for lo in range(0, lay.n, chunk):
        g = np.arange(lo, min(lay.n, lo + chunk), dtype=np.int64)
        k, s, p, o = lay.at(g)
        ts = T0 + g // 1000
        iw.write_table(pa.table({"key": _keys(k), "seq": pa.array(s), "partition": pa.array(p, pa.int32()),
                                 "offset": pa.array(o), "timestamp": pa.array(ts)}, schema=in_schema))
        # output: the same records at the same places, minus the lost ones, with a and b's content swapped
        src = g.copy()
        for x, y in ((a_, b_), (b_, a_)):
            if lo <= x < lo + len(g):
                src[x - lo] = y
        keep = ~np.isin(g, list(lost))
        sk, ss, sp, so = lay.at(src)
        t = _out_table(sk[keep], ss[keep], p[keep], o[keep], ts[keep], _ref(sp[keep], so[keep]),
                       ss[keep] // 100, "0")
        if ow is None:
            ow = pq.ParquetWriter(d / "output.parquet", t.schema)
        ow.write_table(t)
        if hist is not None:
            pd.DataFrame({"index": g, "type": "ok", "f": "send", "key": np.char.add("k", k.astype(str)), "seq": s,
                          "partition": p, "offset": o}).to_json(hist, orient="records", lines=True)
    # the extra copies: the duplicates (same op.input; one pair twice), 2 pairs not in the input, a value
    # without seq, each at the end of its partition
    nxt = lay.size.copy()
    extra = np.r_[pl["dups"], pl["triple"]]
    k, s, p, o = lay.at(extra)
    far_k, far_s = np.array([1, 2]), np.array([FAR, FAR + 1])
    rows_k = np.r_[k, far_k, 3]
    rows_p = rows_k % lay.parts
    offs = []
    for q in rows_p:
        offs.append(nxt[q])
        nxt[q] += 1
    refs = pa.concat_arrays([_ref(p, o), pa.nulls(3, pa.string())])
    t = _out_table(rows_k, np.r_[s, far_s, 0], rows_p, np.asarray(offs), np.full(len(rows_k), T0 + lay.n // 1000),
                   refs, np.full(len(rows_k), 10**6), "1")
    seq = t.column("seq").to_pylist()
    seq[-1] = None
    ow.write_table(t.set_column(1, "seq", pa.array(seq, pa.int64())))
    iw.close()
    ow.close()
    if hist is not None:
        lw = [{"index": lay.n + i, "type": "ok", "f": "send", "key": "k5", "seq": FAR + 100 + i, "partition": 5,
               "offset": 10**12 + i} for i in range(3)]
        hist.write("".join(json.dumps(x) + "\n" for x in lw))
        hist.close()
    (d / "recovery.json").write_text(json.dumps({"finished": True, "reasons": [], "output_lso": {}, "output_hw": {}}))
    (d / "test.json").write_text(json.dumps({"name": "spark-bench", "config": {"workload": "keyed", "nemesis": []}}))
    (d / ".complete").write_text(json.dumps({"records": lay.n, "keys": lay.keys, "parts": lay.parts,
                                             "history": history}))


# ----------------------------------------------------------------------------------------- measuring


def run_check(cmd: list[str], timeout: float) -> dict:
    """Run ``cmd``; wall seconds, CPU seconds of the tree, peak RSS of the tree (MiB), exit code, stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    cpu: dict[int, float] = {}  # last CPU seconds seen per process of the tree (PySpark never waits for its JVM)
    done = threading.Event()

    def sample():
        top = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                total = 0
                for p in [top, *top.children(recursive=True)]:
                    with p.oneshot():
                        total += p.memory_info().rss
                        t = p.cpu_times()
                        cpu[p.pid] = t.user + t.system
                peak[0] = max(peak[0], total)
            except psutil.Error:
                pass
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        done.set()
        return {"timeout": True, "seconds": round(time.perf_counter() - t0, 1)}
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    return {"seconds": round(wall, 1), "cpu_seconds": round(sum(cpu.values()), 1),
            "peak_rss_mib": round(peak[0] / 2**20),
            "exit": proc.returncode, "stdout": out, "stderr_tail": err[-2000:]}


def judge(r: dict, history: bool = True) -> tuple[dict, list[str]]:
    """The result's counts and how they differ from the planted anomalies (no lost writes are planted
    without a history: ``--history none``)."""
    try:
        res = json.loads(r["stdout"][r["stdout"].index("{"):])
    except (KeyError, ValueError):
        return {}, [f"no JSON result (exit {r.get('exit')}): {r.get('stderr_tail', '')[-500:]}"]
    counts = res.get("counts", {})
    want = EXPECTED if history else {**EXPECTED, "lost-write": 0}
    bad = [f"{k}: {counts.get(k)} != {v}" for k, v in want.items() if counts.get(k) != v]
    if res.get("verdict") != "invalid" or r["exit"] != 1:
        bad.append(f"verdict {res.get('verdict')} exit {r['exit']}, want invalid / 1")
    return counts, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--chunk", type=int, default=1_000_000)
    ap.add_argument("--history", choices=("ok", "none"), default="ok")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--engines", default="spark,pandas")
    ap.add_argument("--pandas-max", type=int, default=10_000_000)
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--spark-conf", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per check before it is killed")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "spark_results.json")
    args = ap.parse_args()

    lay = Layout(args.records, args.keys, args.partitions)
    d = args.dir or Path("/tmp/onceproof-spark-bench") / str(args.records)
    shape = {"records": lay.n, "keys": lay.keys, "parts": lay.parts, "history": args.history == "ok"}
    stamp = d / ".complete"
    t0 = time.perf_counter()
    if not (stamp.exists() and json.loads(stamp.read_text()) == shape):
        shutil.rmtree(d, ignore_errors=True)
        write_run(d, lay, args.chunk, args.history == "ok")
    gen_s = time.perf_counter() - t0
    sizes = {p.name: sum(f.stat().st_size for f in ([p] if p.is_file() else p.rglob("*"))) for p in d.iterdir()
             if not p.name.startswith(".")}
    report = {"config": {**vars(args), "dir": str(d), "out": str(args.out), "python": platform.python_version(),
                         "cpus": os.cpu_count(), "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
                         "loadavg_at_start": os.getloadavg()},
              "generate_seconds": round(gen_s, 1), "bytes": sizes, "engines": {}}
    print(f"run dir {d}: {lay.n:,} records, generated in {gen_s:.1f}s; "
          + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in sizes.items()), flush=True)
    failed = False
    for eng in args.engines.split(","):
        if eng == "pandas" and lay.n > args.pandas_max:
            report["engines"][eng] = {"skipped": f"more than --pandas-max {args.pandas_max:,} records"}
            continue
        cmd = [sys.executable, "-m", "onceproof.harness.cli", "check", str(d), "--json", "--engine", eng]
        if eng == "spark":
            cmd += ["--spark-master", args.spark_master] + [a for kv in args.spark_conf for a in ("--spark-conf", kv)]
        print(f"{eng}: {' '.join(cmd[1:])}", flush=True)
        r = run_check(cmd, args.timeout)
        if r.get("timeout"):
            report["engines"][eng] = r
            print(f"  killed after {r['seconds']}s (--timeout)", flush=True)
            failed = True
            continue
        counts, bad = judge(r, args.history == "ok")
        r.pop("stdout")
        r.update(counts=counts, mismatches=bad, records_per_s=round(lay.n / r["seconds"]))
        report["engines"][eng] = r
        failed |= bool(bad)
        print(f"  {r['seconds']}s wall, {r['cpu_seconds']}s CPU, peak RSS {r['peak_rss_mib']:,} MiB, "
              f"{r['records_per_s']:,} records/s; {'OK' if not bad else 'WRONG: ' + '; '.join(bad)}", flush=True)
    report["config"]["loadavg_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prev = json.loads(args.out.read_text()) if args.out.exists() else {}
    prev[str(lay.n)] = report
    args.out.write_text(json.dumps(prev, indent=2, default=str))
    if not args.keep and args.dir is None and not failed:
        shutil.rmtree(d, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
