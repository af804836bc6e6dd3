"""Benchmark of the exactly-once checker (``checkers/exactly_once.py``) and of the topic decode path.

Run from the repo root::

    .venv/bin/python bench/checker_bench.py                      # 10M records: ~4 min, ~9 GiB
    .venv/bin/python bench/checker_bench.py --records 1000000    # quick mode: ~70 s
    .venv/bin/python bench/checker_bench.py --records 1000000 --keys 50 --skip-decode
    .venv/bin/python bench/checker_bench.py --whole-process --records 10000000   # peak RSS: ~3 min
    .venv/bin/python bench/checker_bench.py --real-read --records 2000000        # vs a real read: ~2.5 min

What it measures (see docs/performance.md, "What the checker bench measures, and what not"):

(a) ``check()`` wall and CPU time on synthetic frames shaped like ``onceproof.clients.topics.decode_values``
    output → output records/s (target ≥ 1,000,000/s);
(b) peak RSS of each phase (Linux ``VmHWM`` reset through ``/proc/self/clear_refs`` after a
    ``malloc_trim``, falling back to ``ru_maxrss``) and the in-memory size of the output frame with
    provenance / key columns as object, category or pyarrow strings;
(c) decoding JSON values (``b'{"key":"k12","seq":345,...}'``) into checker frames: the current
    ``topics.decode_values`` against faster alternatives (``decode_values_arrow`` below: pyarrow.json
    on joined buffers, falling back to the exact per-record path around bad values), and
    ``topics._headers_frame`` against ``headers_frame_columns``;
(d) "whole check vs raw read": raw read = materialising read_topic's columns from in-memory
    messages, either (partition, offset, timestamp, key, value) tuples or ``confluent_kafka.Message``
    objects run through read_topic's own per-message loop (+ headers for the output topic); whole
    check = raw read + decode + check. (c) and (d) use a run of their own, ``--decode-records``
    (default 2M per topic): per-record costs are linear and 10M would need ~15 GiB.

The checker must find exactly the planted anomalies (lost, duplicates, a reordering, unexpected
records, a garbage value, lost writes) or the bench exits non-zero.

Numbers are printed as a table and written to ``bench/results.json`` (``--out``).

``--whole-process`` measures something else: the whole ``checking.check_live`` path (chunked topic
reads fed with synthetic ``confluent_kafka.Message`` objects instead of Kafka, the history read, the
snapshots, every check) in a child process per ``--records`` size, reporting its peak RSS and the
analysis rate (``bench/whole_process.py``; results in ``bench/whole_process.json``)::

    .venv/bin/python bench/checker_bench.py --whole-process --records 2000000,10000000
    .venv/bin/python bench/checker_bench.py --whole-process --records 2000000 --code-root /path/to/main
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onceproof.checkers.exactly_once import check  # noqa: E402
from onceproof.store.columns import release_freed_memory  # noqa: E402
from whole_process import _reset_peak, _status_kb  # noqa: E402  (bench/ is the script's directory)

PROV = ("op.batch", "op.sink_partition", "op.attempt", "op.txn_id", "op.sink")


# ----------------------------------------------------------------------------------------------------
# memory

class Phase:
    """Times a block and records its peak RSS (absolute, and above the RSS at entry), in MiB."""

    can_reset = None

    def __init__(self, name: str, results: dict):
        self.name, self.results = name, results

    def __enter__(self):
        gc.collect()
        release_freed_memory()  # give freed heap pages back, so this phase's peak is its own
        if Phase.can_reset is None:
            Phase.can_reset = _reset_peak()
        elif Phase.can_reset:
            _reset_peak()
        self.rss0 = _status_kb("VmRSS")
        self.c0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.cpu_seconds = time.process_time() - self.c0
        if Phase.can_reset:
            peak = _status_kb("VmHWM")
        else:  # process-lifetime high-water mark only
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.results[self.name] = {"seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                                   "peak_rss_mib": round(peak / 1024, 1),
                                   "peak_above_start_mib": round((peak - self.rss0) / 1024, 1),
                                   "retained_mib": round((_status_kb("VmRSS") - self.rss0) / 1024, 1)}
        return False


# ----------------------------------------------------------------------------------------------------
# synthetic run

def _cumcount(group: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group, 0, 1, 2, ... in array order."""
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group, minlength=ngroups)
    starts = np.cumsum(sizes) - sizes
    out = np.empty(len(group), np.int64)
    out[order] = np.arange(len(group)) - np.repeat(starts, sizes)
    return out


def _strings(uniq: list[str], codes: np.ndarray, dtype: str):
    """A string column with one str object per row (as JSON decoding makes), in the requested dtype."""
    if dtype == "category":
        return pd.Categorical.from_codes(codes, categories=pd.Index(uniq, dtype=object))
    arr = np.array(uniq)[codes].astype(object)  # distinct str objects, like json.loads / bytes.decode
    if dtype == "pyarrow":
        return pd.array(arr, dtype="string[pyarrow]")
    return pd.array(arr, dtype="string") if dtype == "string" else arr


def make_run(n: int, n_keys: int, n_parts: int, seed: int, key_dtype: str = "string",
             prov_dtype: str = "object") -> dict:
    """Input/output/history frames for ``n`` records over ``n_keys`` keys, with planted anomalies.

    The output is the input, in order (per key and per partition), on ``n_parts`` output partitions,
    plus: 7 lost records, 12 duplicated (key, seq) pairs with 13 extra copies (one pair three times),
    one swapped pair of consecutive records of one key (1 nonmonotonic), 2 records with a seq never
    produced and one unparseable value (3 unexpected); the history has an ok send for every input
    record plus 3 acknowledged sends missing from the input (lost-write), 2 info and 1 fail send.
    """
    rng = np.random.default_rng(seed)
    keys = [f"k{i}" for i in range(n_keys)]
    K = rng.integers(0, n_keys, n)
    seq = _cumcount(K, n_keys)
    in_part_of_key = rng.integers(0, n_parts, n_keys)
    out_part_of_key = rng.integers(0, n_parts, n_keys)
    P = in_part_of_key[K]
    OFF = _cumcount(P, n_parts)
    ts = 1_795_311_883_494 + np.arange(n) // 1000

    inp = pd.DataFrame({"partition": P.astype(np.int32), "offset": OFF, "timestamp": ts,
                        "key": _strings(keys, K, key_dtype), "seq": pd.array(seq, dtype="Int64")})

    # --- planted anomalies: distinct records from the middle of the run
    pool = rng.choice(np.arange(n // 10, n - n // 10), size=40, replace=False)
    lost, dup1, dup_tri, dup_more = pool[:7], pool[7:12], pool[12:13], pool[13:19]
    used = set(pool[:19].tolist())
    # a reordering: two consecutive records (seq s, s+1) of one key, swapped in the output
    for cand in pool[19:]:
        k = K[cand]
        nxt = np.flatnonzero(K[cand + 1:] == k)
        if len(nxt) and (cand + 1 + nxt[0]) not in used:
            swap_a, swap_b = int(cand), int(cand + 1 + nxt[0])
            break
    else:
        raise RuntimeError("no reorder candidate")

    order = np.arange(n)
    order[[swap_a, swap_b]] = [swap_b, swap_a]
    keep = np.ones(n, bool)
    keep[lost] = False
    keep = keep[order]
    src = order[keep]                                   # input record behind each output record
    extra = np.concatenate([dup1, dup_tri, dup_tri, dup_more])
    src_all = np.concatenate([src, extra])
    attempt = np.r_[np.zeros(len(src), np.int8), np.ones(len(extra), np.int8)]
    OP = out_part_of_key[K[src_all]]
    OO = _cumcount(OP, n_parts)
    batch = (np.arange(len(src_all)) // 50_000)
    batch[len(src):] = batch[len(src) - 1] + 1         # re-emitted by a later micro-batch
    n_batches = int(batch.max()) + 1
    out = pd.DataFrame({
        "partition": OP.astype(np.int32), "offset": OO, "timestamp": ts[src_all] + 5,
        "key": _strings(keys, K[src_all], key_dtype),
        "seq": pd.array(seq[src_all], dtype="Int64"),
        "in_partition": P[src_all], "in_offset": OFF[src_all], "in_ts": ts[src_all],
        "op.batch": _strings([str(b) for b in range(n_batches)], batch, prov_dtype),
        "op.sink_partition": _strings([str(p) for p in range(n_parts)], OP, prov_dtype),
        "op.attempt": _strings(["0", "1"], attempt.astype(np.int64), prov_dtype),
        "op.txn_id": _strings([f"onceproof-eos-{p}" for p in range(n_parts)], P[src_all], prov_dtype),
        "op.sink": _strings(["eos"], np.zeros(len(src_all), np.int64), prov_dtype),
    })
    # unexpected: two never-produced seqs, one garbage value (seq NA, key from the Kafka key)
    unexp_keys = [keys[K[pool[-1]]], keys[K[pool[-2]]]]
    tail = pd.DataFrame({
        "partition": np.array([0, 1, 1], np.int32) % n_parts, "offset": [0, 0, 0],
        "timestamp": [ts[-1]] * 3, "key": unexp_keys + [keys[0]],
        "seq": pd.array([10**9, 10**9 + 1, None], dtype="Int64"),
        "in_partition": [0, 0, 0], "in_offset": [-1, -1, -1], "in_ts": [0, 0, 0],
        **{c: ["x", "x", "x"] for c in PROV}})
    for i, p in enumerate(tail["partition"]):
        tail.loc[i, "offset"] = int(OO[OP == p].max(initial=-1)) + 1 + i
    # the provenance our pipeline always writes: the checker pairs copies with input records through it
    in_ref = pd.Series(P[src_all]).astype(str) + ":" + pd.Series(OFF[src_all]).astype(str)
    out["op.input"] = in_ref.to_numpy(dtype=object)
    tail["op.input"] = ["0:-1"] * 3
    dtypes = {c: out[c].dtype for c in ("key",) + PROV}
    out = pd.concat([out.astype({c: object for c in dtypes}), tail], ignore_index=True)
    out = out.astype({c: ("category" if isinstance(t, pd.CategoricalDtype) else t) for c, t in dtypes.items()})

    hist = pd.DataFrame({"type": _strings(["ok"], np.zeros(n, np.int64), "object"),
                         "f": _strings(["send"], np.zeros(n, np.int64), "object"),
                         "key": _strings(keys, K, "object"), "seq": seq, "partition": P, "offset": OFF})
    lw_seq = [2 * 10**9 + i for i in range(3)]
    hist = pd.concat([hist, pd.DataFrame({
        "type": ["ok"] * 3 + ["info", "info", "fail"], "f": ["send"] * 6,
        "key": [keys[K[pool[i]]] for i in range(6)], "seq": lw_seq + [3 * 10**9, 3 * 10**9 + 1, 3 * 10**9 + 2],
        "partition": [0] * 6, "offset": [10**12 + i for i in range(6)]})], ignore_index=True)

    expect = {
        "counts": {"duplicate": 12, "duplicate-records": 13, "lost": 7, "unexpected": 3,
                   "nonmonotonic": 1, "lost-write": 3, "failed-write-visible": 0, "input-duplicate": 0,
                   "input-duplicate-records": 0},
        "lost": {(keys[K[i]], int(seq[i])) for i in lost},
        "duplicate": {(keys[K[i]], int(seq[i])) for i in extra},
        "nonmonotonic": (keys[K[swap_a]], int(seq[swap_a]), int(seq[swap_b])),
        "lost-write": {(keys[K[pool[i]]], lw_seq[i]) for i in range(3)},
    }
    return {"input": inp, "output": out, "history": hist, "expect": expect}


def verify(result: dict, expect: dict, what: str, provenance: bool = True) -> None:
    """Assert the checker found exactly the planted anomalies (raises AssertionError)."""
    c = result["counts"]
    assert c == expect["counts"], f"{what}: counts {c} != planted {expect['counts']}"
    assert result["verdict"] == "invalid", what
    a = result["anomalies"]
    got_lost = {(x["key"], x["seq"]) for x in a["lost"]}
    assert got_lost == expect["lost"], f"{what}: lost examples {got_lost}"
    got_dup = {(x["key"], x["seq"]) for x in a["duplicate"]}
    assert got_dup <= expect["duplicate"] and len(got_dup) == 10, f"{what}: duplicate examples {got_dup}"
    assert sorted(len(x["copies"]) for x in a["duplicate"])[-1] <= 3
    nm = a["nonmonotonic"][0]
    assert (nm["key"], nm["seq"], nm["prev_seq"]) == expect["nonmonotonic"], f"{what}: {nm}"
    assert {(x["key"], x["seq"]) for x in a["lost-write"]} == expect["lost-write"], what
    assert sorted(x.get("seq", -1) for x in a["unexpected"]) == [-1, 10**9, 10**9 + 1], what
    if provenance:
        assert all({"batch", "attempt", "txn_id"} <= set(cp) for x in a["duplicate"] for cp in x["copies"])
        assert any(cp["attempt"] == "1" for x in a["duplicate"] for cp in x["copies"])
    total = sum(sum(v.values()) for v in result["bad_keys"].values())
    assert total == 12 + 7 + 3 - 1 + 1 + 3, f"{what}: bad_keys total {total}"  # garbage value has no seq


# ----------------------------------------------------------------------------------------------------
# raw messages and decoding

def make_messages(frame: pd.DataFrame, output: bool) -> list[tuple]:
    """(partition, offset, timestamp, key bytes, value bytes) per record, values as the job writes them."""
    keys = frame["key"].astype(str).to_numpy()
    seq = frame["seq"].to_numpy(dtype=np.float64, na_value=np.nan)
    kb = {k: k.encode() for k in set(keys)}
    if output:
        fmt = '{"key":"%s","seq":%d,"in_partition":%d,"in_offset":%d,"in_ts":%d}'
        vals = [(fmt % (k, s, ip, io_, it)).encode() if s == s else b"\x00garbage"
                for k, s, ip, io_, it in zip(keys, seq, frame["in_partition"].tolist(),
                                             frame["in_offset"].tolist(), frame["in_ts"].tolist())]
    else:
        fmt = '{"key":"%s","seq":%d,"t":%d}'
        vals = [(fmt % (k, s, t)).encode() for k, s, t in zip(keys, seq, frame["timestamp"].tolist())]
    return list(zip(frame["partition"].tolist(), frame["offset"].tolist(), frame["timestamp"].tolist(),
                    [kb[k] for k in keys], vals))


def raw_read(msgs: list[tuple]) -> pd.DataFrame:
    """What ``topics.read_topic`` does per message once librdkafka handed it over (no headers)."""
    parts, offs, keys, vals, tss = [], [], [], [], []
    for p, o, ts, k, v in msgs:
        parts.append(p)
        offs.append(o)
        tss.append(ts)
        keys.append(k.decode() if k is not None else None)
        vals.append(v)
    return pd.DataFrame({"partition": pd.array(parts, dtype="int32"),
                         "offset": pd.array(offs, dtype="int64"),
                         "timestamp": pd.array(tss, dtype="int64"),
                         "key": keys, "value": vals})


def make_kafka_messages(frame: pd.DataFrame, msgs: list[tuple], output: bool) -> list:
    """The same records as ``confluent_kafka.Message`` objects; output ones carry the provenance
    headers (header lists are shared between records with equal values, to spare memory)."""
    from confluent_kafka import Message
    if not output:
        return [Message(topic="in", partition=p, offset=o, key=k, value=v, timestamp=(1, ts))
                for p, o, ts, k, v in msgs]
    prov = [c for c in PROV if c in frame.columns]
    cols = [frame[c].astype(str).tolist() for c in prov]
    cache: dict = {}
    hdrs = []
    for vals in zip(*cols):
        h = cache.get(vals)
        if h is None:
            h = cache[vals] = [(c, v.encode()) for c, v in zip(prov, vals)]
        hdrs.append(h)
    return [Message(topic="out", partition=p, offset=o, key=k, value=v, timestamp=(1, ts), headers=h)
            for (p, o, ts, k, v), h in zip(msgs, hdrs)]


def raw_read_messages(msgs: list, with_headers: bool) -> pd.DataFrame:
    """``topics.read_topic``'s per-message loop and frame building (``onceproof.clients.topics.Records``, the code
    itself) on Message objects: everything but librdkafka's fetching, the consume() calls and the
    position checks."""
    from onceproof.clients.topics import Records
    ends = {}
    for m in msgs[-1000:]:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
    ends = {p: 1 << 62 for p in range(64)} | ends
    records = Records("bench", with_headers)
    records.add(msgs, ends, set(ends))
    return records.frame()


def headers_frame_columns(hdrs: list) -> pd.DataFrame:
    """The column-at-a-time header frame this bench proposed; ``topics._headers_frame`` now *is* it,
    so the two timings agree (the dict-per-record baseline is in docs/performance.md)."""
    from onceproof.clients.topics import _headers_frame

    return _headers_frame(hdrs)


def decode_values_arrow(frame: pd.DataFrame) -> pd.DataFrame:
    """The pyarrow.json decoder this bench proposed; ``topics.decode_values`` now *is* it."""
    from onceproof.clients.topics import decode_values

    return decode_values(frame)


def decode_values_joined_json(frame: pd.DataFrame) -> pd.DataFrame:
    """Alternative: one stdlib json.loads over '[v1,v2,...]' (falls back per record on any error)."""
    from onceproof.clients.topics import _parse_slow

    vals = frame["value"].to_numpy(dtype=object)
    try:
        recs = json.loads(b"[" + b",".join(vals) + b"]")
        if len(recs) != len(vals) or not all(type(r) is dict for r in recs):
            raise ValueError
        parsed = pd.DataFrame.from_records(recs, index=frame.index)
    except (TypeError, ValueError):
        parsed = _parse_slow(vals).set_axis(frame.index)
    out = frame.drop(columns=["value"])
    if "key" in parsed:
        out["key"] = parsed["key"].astype("string").fillna(out["key"].astype("string"))
    out["seq"] = pd.to_numeric(parsed["seq"], errors="coerce").astype("Int64")
    for col in parsed.columns:
        if col not in ("key", "seq"):
            out[col] = parsed[col]
    return out


def _same_frame(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # NA vs NaN in object columns: equal here
            pd.testing.assert_frame_equal(a, b, check_dtype=False, check_column_type=False)
        return True
    except AssertionError as e:
        print("  decode mismatch:", str(e)[:300])
        return False


# ----------------------------------------------------------------------------------------------------

def frame_memory(out: pd.DataFrame) -> dict:
    """Deep memory of the output frame's provenance columns as object, category and pyarrow strings."""
    res = {}
    prov = [c for c in out.columns if c.startswith("op.")]
    res["frame_total_mib_as_generated"] = round(float(out.memory_usage(deep=True).sum()) / 2**20, 1)
    for name, conv in (("object", lambda s: s.astype(object)),
                       ("category", lambda s: s.astype("category")),
                       ("pyarrow", lambda s: s.astype("string[pyarrow]"))):
        res[f"provenance_mib_{name}"] = round(sum(
            conv(out[c]).memory_usage(deep=True, index=False) for c in prov) / 2**20, 1)
    for name, conv in (("string", lambda s: s.astype("string")),
                       ("category", lambda s: s.astype("category")),
                       ("pyarrow", lambda s: s.astype("string[pyarrow]"))):
        res[f"key_mib_{name}"] = round(conv(out["key"]).memory_usage(deep=True, index=False) / 2**20, 1)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", default="10000000", help="records (with --whole-process: sizes, comma-separated)")
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys (the design's range: 50..10,000)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--key-dtype", default="string", choices=["string", "object", "category", "pyarrow"],
                    help="dtype of the key column (decode_values makes 'string')")
    ap.add_argument("--prov-dtype", default="object", choices=["object", "category", "pyarrow"],
                    help="dtype of the op.* provenance columns (read_topic makes object)")
    ap.add_argument("--repeat", type=int, default=1, help="check() runs; the best is reported")
    ap.add_argument("--skip-decode", action="store_true", help="skip (c) and (d)")
    ap.add_argument("--decode-records", type=int, default=2_000_000,
                    help="records per topic for (c) and (d), a run of its own (10M needs ~15 GiB)")
    ap.add_argument("--skip-current-decode", action="store_true",
                    help="skip topics.decode_values (slow: ~minutes at 10M)")
    ap.add_argument("--skip-memory", action="store_true", help="skip the per-dtype frame memory table")
    ap.add_argument("--checker-file", help="benchmark check() from this file instead (e.g. an older "
                    "version: git show REV:checkers/exactly_once.py > /tmp/old.py)")
    ap.add_argument("--out", default=None, help="default: bench/results.json, or bench/whole_process.json "
                    "with --whole-process")
    ap.add_argument("--whole-process", action="store_true",
                    help="peak RSS and analysis rate of the whole check_live path per --records size "
                    "(comma-separated), each in a child process (bench/whole_process.py)")
    ap.add_argument("--code-root", default=str(ROOT), help="--whole-process: the checkout whose harness is "
                    "measured (e.g. a worktree of main)")
    ap.add_argument("--rss-limit-mib", type=float, default=6144,
                    help="--whole-process: kill a child whose RSS passes this (MiB)")
    ap.add_argument("--real-read", action="store_true",
                    help="the whole check against a real Kafka read of --records on a fresh cluster "
                    "(bench/real_read_ratio.py; --out: its JSON)")
    a = ap.parse_args(argv)
    if a.whole_process:
        return whole_process_main(a)
    if a.real_read:
        sys.path.insert(0, str(ROOT / "bench"))
        import real_read_ratio
        return real_read_ratio.main(["--records", str(int(a.records)), "--keys", str(a.keys), "--seed", str(a.seed)]
                                    + (["--json", a.out] if a.out else []))
    a.records = int(a.records)
    a.out = a.out or str(ROOT / "bench" / "results.json")
    if a.checker_file:
        import importlib.util
        spec = importlib.util.spec_from_file_location("checker_under_test", a.checker_file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
        globals()["check"] = mod.check

    res: dict = {"config": {**vars(a), "python": platform.python_version(), "pandas": pd.__version__,
                            "numpy": np.__version__, "cpus": os.cpu_count(),
                            "loadavg_at_start": os.getloadavg()}}
    phases: dict = {}
    with Phase("generate", phases):
        run = make_run(a.records, a.keys, a.partitions, a.seed, a.key_dtype, a.prov_dtype)
    inp, out, hist, expect = run["input"], run["output"], run["history"], run["expect"]
    n_out = len(out)
    print(f"records: input {len(inp):,}  output {n_out:,}  history {len(hist):,}  keys {a.keys:,}  "
          f"(generated in {phases['generate']['seconds']:.1f}s; load avg {os.getloadavg()[0]:.1f})")

    best = None
    for i in range(a.repeat):
        with Phase(f"check#{i}", phases) as ph:
            r = check(hist, inp, out)
        verify(r, expect, "check on synthetic frames")
        best = ph.seconds if best is None else min(best, ph.seconds)
    chk = phases["check#0"]
    best_cpu = min(v["cpu_seconds"] for k, v in phases.items() if k.startswith("check#"))
    res["check"] = {"seconds": round(best, 3), "cpu_seconds": round(best_cpu, 3),
                    "output_records_per_s": round(n_out / best),
                    "output_records_per_s_cpu": round(n_out / best_cpu),
                    "peak_rss_mib": chk["peak_rss_mib"], "peak_above_start_mib": chk["peak_above_start_mib"],
                    "target_records_per_s": 1_000_000, "meets_target": n_out / best >= 1_000_000}
    print(f"(a) check(): {best:.2f}s = {n_out / best:,.0f} output records/s "
          f"(target 1,000,000) peak RSS {chk['peak_rss_mib']:,.0f} MiB "
          f"(+{chk['peak_above_start_mib']:,.0f} MiB over the frames)")

    if not a.skip_memory:
        with Phase("memory", phases):
            res["frame_memory"] = frame_memory(out)
        print("(b) frame memory MiB:", res["frame_memory"])

    del run, inp, out, hist
    gc.collect()
    if not a.skip_decode:
        res["decode"] = bench_decode(a, phases)
    res["phases"] = phases
    res["config"]["loadavg_at_end"] = os.getloadavg()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2, default=str) + "\n")
    print_table(res)
    print(f"wrote {a.out}")
    return 0


def bench_decode(a, phases: dict) -> dict:
    """(c) and (d) on a run of their own (``--decode-records``): the raw reads hold every message
    and ``read_topic``'s header decoding makes one dict per record (~0.5 KiB each), so at 10M records
    this part needs ~15 GiB on its own; per-record costs are linear, so the ratios carry over."""
    from onceproof.clients import topics

    run = make_run(a.decode_records, a.keys, a.partitions, a.seed + 1, a.key_dtype, a.prov_dtype)
    hist, expect = run.pop("history"), run.pop("expect")
    d: dict = {}
    frames = {}
    for name, is_out in (("input", False), ("output", True)):
        frame = run.pop(name)
        with Phase(f"make_messages:{name}", phases):
            msgs = make_messages(frame, is_out)
        with Phase(f"raw_read_tuples:{name}", phases):
            raw = raw_read(msgs)
        del raw
        with Phase(f"make_kafka_messages:{name}", phases):
            kmsgs = make_kafka_messages(frame, msgs, is_out)
        del msgs, frame
        gc.collect()
        with Phase(f"raw_read_messages:{name}", phases):
            frames[name] = raw_read_messages(kmsgs, with_headers=is_out)
        if is_out:
            hdrs = [m.headers() for m in kmsgs]
            with Phase("headers:current_headers_frame", phases):
                h_old = topics._headers_frame(hdrs)
            with Phase("headers:columns_proposal", phases):
                h_new = headers_frame_columns(hdrs)
            d["headers_proposal_matches_current"] = _same_frame(h_old, h_new)
            del hdrs, h_old, h_new
        del kmsgs
        gc.collect()

    # pyarrow first: the others are compared with its frames, then dropped
    decoders = {"pyarrow_json": decode_values_arrow, "joined_stdlib_json": decode_values_joined_json}
    if not a.skip_current_decode:
        decoders["current_decode_values"] = topics.decode_values
    decoded = {}
    for dname, fn in decoders.items():
        for name, raw in frames.items():
            with Phase(f"decode:{dname}:{name}", phases):
                decoded[(dname, name)] = fn(raw)
        if dname != "pyarrow_json":
            for name in frames:
                d[f"{dname}_matches_pyarrow:{name}"] = _same_frame(decoded[("pyarrow_json", name)],
                                                                   decoded[(dname, name)])
                del decoded[(dname, name)]
            gc.collect()
    with Phase("check:decoded", phases):
        r = check(hist, decoded[("pyarrow_json", "input")], decoded[("pyarrow_json", "output")])
    verify(r, expect, "check on decoded frames")

    n = sum(len(v) for v in frames.values())
    reads = {"tuples": sum(phases[f"raw_read_tuples:{t}"]["seconds"] for t in frames),
             "messages": sum(phases[f"raw_read_messages:{t}"]["seconds"] for t in frames)}
    cpu = lambda prefix: sum(phases[f"{prefix}:{t}"]["cpu_seconds"] for t in frames)  # noqa: E731
    chk_s = phases["check:decoded"]["seconds"]
    d["records"] = n
    for rname, rs in reads.items():
        d[f"raw_read_{rname}"] = {"seconds": round(rs, 3), "cpu_seconds": round(cpu(f"raw_read_{rname}"), 3),
                                  "records_per_s": round(n / rs)}
    for hname in ("current_headers_frame", "columns_proposal"):
        ph = phases[f"headers:{hname}"]
        d[f"headers_{hname}"] = {"seconds": ph["seconds"], "cpu_seconds": ph["cpu_seconds"],
                                 "peak_above_start_mib": ph["peak_above_start_mib"],
                                 "retained_mib": ph["retained_mib"]}
    d["check_on_decoded"] = {"seconds": round(chk_s, 3), "cpu_seconds": phases["check:decoded"]["cpu_seconds"]}
    for dname in decoders:
        dec_s = sum(phases[f"decode:{dname}:{t}"]["seconds"] for t in frames)
        d[f"decode_{dname}"] = {"seconds": round(dec_s, 3), "cpu_seconds": round(cpu(f"decode:{dname}"), 3),
                                "records_per_s": round(n / dec_s),
                                "peak_rss_mib": max(phases[f"decode:{dname}:{t}"]["peak_rss_mib"] for t in frames)}
        for rname, rs in reads.items():
            whole = rs + dec_s + chk_s
            whole_cpu = cpu(f"raw_read_{rname}") + cpu(f"decode:{dname}") + phases["check:decoded"]["cpu_seconds"]
            d[f"whole_check:{dname}:vs_raw_read_{rname}"] = {
                "seconds": round(whole, 3), "ratio": round(whole / rs, 3),
                "ratio_cpu": round(whole_cpu / cpu(f"raw_read_{rname}"), 3),
                "target": 1.3, "meets_target": whole / rs <= 1.3}
    return d


def whole_process_main(a) -> int:
    """``--whole-process``: one child per size (``whole_process.run``); a table and ``--out``. Exit 1 when
    a child failed (its counts were not the planted ones, it crashed or passed the RSS limit)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import whole_process

    runs = []
    for n in (int(x) for x in str(a.records).split(",")):
        print(f"whole process, {n:,} records, code from {a.code_root} ...", flush=True)
        rep = whole_process.run(n, a.keys, a.partitions, a.seed, a.code_root, a.rss_limit_mib)
        runs.append(rep)
        print(f"  exit {rep['exit']}  peak RSS {rep.get('peak_rss_mib')} MiB  (killed at {rep.get('killed_at_mib')})  "
              f"check_live {rep.get('check_live_seconds')} s  analysis {rep.get('analysis_records_per_s')} records/s  "
              f"check() {rep.get('check_records_per_s')} records/s", flush=True)
    out = Path(a.out or ROOT / "bench" / "whole_process.json")
    out.write_text(json.dumps({"config": {"keys": a.keys, "partitions": a.partitions, "seed": a.seed,
                                          "code_root": a.code_root, "python": platform.python_version(),
                                          "cpus": os.cpu_count()}, "runs": runs}, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


def print_table(res: dict) -> None:
    c = res["check"]
    rows = [("check(): wall s / cpu s", f"{c['seconds']} / {c['cpu_seconds']}"),
            ("check(): output records/s, wall (target >= 1,000,000)", f"{c['output_records_per_s']:,}"),
            ("check(): output records/s, cpu", f"{c['output_records_per_s_cpu']:,}"),
            ("check(): peak RSS MiB (above the frames)",
             f"{c['peak_rss_mib']:,.0f} (+{c['peak_above_start_mib']:,.0f})")]
    d = res.get("decode")
    if d:
        rows.append(("records decoded (input + output)", f"{d['records']:,}"))
        for k, v in d.items():
            if k.startswith(("raw_read_", "decode_")):
                rows.append((f"{k}: wall s / cpu s / records/s (wall)",
                             f"{v['seconds']} / {v['cpu_seconds']} / {v['records_per_s']:,}"))
        for k in ("headers_current_headers_frame", "headers_columns_proposal"):
            v = d[k]
            rows.append((f"{k} (output): wall s / cpu s / peak, kept +MiB",
                         f"{v['seconds']} / {v['cpu_seconds']} / {v['peak_above_start_mib']:,.0f}, "
                         f"{v['retained_mib']:,.0f}"))
        rows.append(("check() on the decoded frames: wall s / cpu s",
                     f"{d['check_on_decoded']['seconds']} / {d['check_on_decoded']['cpu_seconds']}"))
        for k, v in d.items():
            if k.startswith("whole_check:"):
                rows.append((f"{k[12:]}: whole/read wall (cpu) (target <= 1.3)",
                             f"{v['ratio']} ({v['ratio_cpu']})"))
    w = max(len(r[0]) for r in rows)
    print("-" * (w + 30))
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    print("-" * (w + 30))


if __name__ == "__main__":
    sys.exit(main())
