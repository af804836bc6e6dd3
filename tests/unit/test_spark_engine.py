"""`onceproof check --engine spark` gives the pandas engine's result: equal verdicts, counts, examples,
stats and exit codes on stored runs with every anomaly planted (synthetic run directories, parquet
written by pandas and by Spark), on real Spark (one local[2] session for the module, marker
`spark_local`). Also: runs the Spark engine does not cover are usage errors (254) before Spark starts,
and Spark's Kafka rows decode as `onceproof.clients.topics.decode_values` decodes the same bytes.

No Kafka is started: the runs are files, as `onceproof check RUN_DIR` reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from onceproof.harness.cli import main
from tests.conftest import run_cli

T0 = 1_700_000_000_000  # epoch ms of the first input record
KEYS = [f"k{i}" for i in range(5)]
SEQS = 9
PARTS = 3


# ---------------------------------------------------------------------------------------- synthetic runs


def _input() -> pd.DataFrame:
    """KEYS × SEQS records over PARTS partitions (key i → partition i % PARTS), timestamps 10 ms apart."""
    rows, off = [], {p: 0 for p in range(PARTS)}
    for s in range(SEQS):
        for i, k in enumerate(KEYS):
            p = i % PARTS
            rows.append({"key": k, "seq": s, "partition": p, "offset": off[p]})
            off[p] += 1
    df = pd.DataFrame(rows)
    df["timestamp"] = T0 + 10 * np.arange(len(df))
    return df


def _append(df: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """``rows`` appended at the end of their partitions (offsets continue)."""
    out = df
    for r in rows:
        p = r["partition"]
        nxt = int(out.loc[out["partition"] == p, "offset"].max()) + 1 if (out["partition"] == p).any() else 0
        out = pd.concat([out, pd.DataFrame([{**r, "offset": nxt, "timestamp": T0 + 5000 + len(out)}])],
                        ignore_index=True)
    return out


def _copy(r, *, ref: bool = True, batch: int = 1, part: int | None = None, attempt: int = 0, inc: str = "1",
          **over) -> dict:
    """The output copy of input row ``r`` as the eos sink writes it (provenance headers as strings)."""
    sp = r["partition"] if part is None else part
    d = {"key": r["key"], "seq": r["seq"], "partition": r["partition"], "op.batch": str(batch),
         "op.sink_partition": str(sp), "op.attempt": str(attempt), "op.txn_id": f"s-{sp}", "op.incarnation": inc,
         "op.input": f"{r['partition']}:{r['offset']}" if ref else None}
    d.update(over)
    return d


def _out_frame(copies: list[dict]) -> pd.DataFrame:
    """Output records in the given order; offsets per output partition, timestamps after the input."""
    df = pd.DataFrame(copies)
    df["offset"] = df.groupby("partition").cumcount()
    df["timestamp"] = T0 + 20 + 10 * np.arange(len(df))
    df["seq"] = df["seq"].astype("Int64")
    return df[["key", "seq", "partition", "offset", "timestamp"] + [c for c in df.columns if c.startswith("op.")]]


def _history(inp: pd.DataFrame, extra: list[dict] = (), cut: int = 0) -> list[dict]:
    """invoke + ok per input record (the ok with its partition/offset), then ``extra`` ops; ``cut``
    drops the last ``cut`` records' ops (a history that ends before the input does)."""
    ops = []
    recs = inp.dropna(subset=["seq"]).drop_duplicates(["key", "seq"])
    if cut:
        recs = recs.iloc[:-cut]
    for r in recs.to_dict("records"):
        ops.append({"type": "invoke", "f": "send", "key": r["key"], "seq": int(r["seq"])})
        ops.append({"type": "ok", "f": "send", "key": r["key"], "seq": int(r["seq"]),
                    "partition": int(r["partition"]), "offset": int(r["offset"])})
    return ops + list(extra)


def _write(d: Path, *, inp, out, unc=None, live=None, history=None, sink=None, nemesis=None, recovery=None,
           test=None, spark=None) -> Path:
    """A run directory; with ``spark``, the snapshots are written by Spark (directories of part files)."""
    d.mkdir(parents=True)

    def save(frame, name):
        if frame is None:
            return
        if spark is None:
            strings = {c: "string" for c in frame.columns if frame[c].dtype == object}
            frame.astype(strings).to_parquet(d / name, index=False)
        else:
            spark.createDataFrame(frame.astype(object).where(frame.notna(), None)).repartition(3) \
                .write.parquet(str(d / name))

    for frame, name in ((inp, "input.parquet"), (out, "output.parquet"), (unc, "output_uncommitted.parquet"),
                        (live, "live.parquet")):
        save(frame, name)
    for ops, name in ((history, "history.jsonl"), (sink, "sink.jsonl"), (nemesis, "nemesis.jsonl")):
        if ops is not None:
            (d / name).write_text("".join(json.dumps({"index": i, **op}) + "\n" for i, op in enumerate(ops)))
    (d / "recovery.json").write_text(json.dumps(recovery or {"finished": True, "reasons": [], "output_lso": {},
                                                             "output_hw": {}}))
    (d / "test.json").write_text(json.dumps(test or {"name": "t", "replay": "onceproof run --seed 1",
                                                     "config": {"nemesis": [], "workload": "keyed"}}))
    return d


def everything_run(d: Path) -> Path:
    """An eos-like run (every copy names its input record, `op.input`) with one or more of each anomaly:
    duplicate (a record named twice; an extra unpaired copy; a pair not in the input twice), lost (a record
    without copy; one of an input-duplicate pair's two records), unexpected (a pair not in the input, an
    unknown key, op.input naming nothing, op.input naming another pair, a value without seq),
    nonmonotonic, lost-write, failed-write-visible, input-duplicate, aborted-read, stuck, live-duplicate,
    live-aborted-read, a torn last history line, faults near the examples; and a key whose last records
    went to a partition added mid-run, copied before its older ones (no order is owed across partitions)."""
    inp = _input()
    inp = _append(inp, [{"key": "k1", "seq": 3, "partition": 1},          # input-duplicate k1/3
                        {"key": "k0", "seq": pd.NA, "partition": 0},      # an input value without seq
                        {"key": "k0", "seq": SEQS, "partition": PARTS},   # k0 moved to an added partition
                        {"key": "k0", "seq": SEQS + 1, "partition": PARTS}])
    inp["seq"] = inp["seq"].astype("Int64")
    rows = inp.dropna(subset=["seq"]).to_dict("records")
    by = {}
    for r in rows:
        by.setdefault((r["key"], int(r["seq"])), r)
    copies = []
    for r in rows:
        k, s = r["key"], int(r["seq"])
        if (k, s) == ("k3", 4):
            continue                                                       # lost (by op.input)
        if k == "k1" and s == 3:
            if r["offset"] == by[("k1", 3)]["offset"]:
                copies.append(_copy(r, ref=False))                        # one unpaired copy for two records
            continue
        copies.append(_copy(r, batch=1 + s // 3))
    moved = [i for i, c in enumerate(copies) if c["key"] == "k0" and c["seq"] >= SEQS]
    copies = [copies[i] for i in moved] + [c for i, c in enumerate(copies) if i not in moved]  # read first
    for c in copies[:len(moved)]:
        c["partition"] = 0  # the output topic did not grow
    # nonmonotonic: k4's 6 and 7 swapped
    i6 = next(i for i, c in enumerate(copies) if (c["key"], c["seq"]) == ("k4", 6))
    i7 = next(i for i, c in enumerate(copies) if (c["key"], c["seq"]) == ("k4", 7))
    copies[i6], copies[i7] = copies[i7], copies[i6]
    copies += [
        _copy(by[("k0", 2)], batch=1),                                     # duplicate: named twice
        _copy(by[("k2", 5)], ref=False, batch=2),                          # duplicate: unpaired extra copy
        _copy(by[("k4", 1)], ref=False, seq=99), _copy(by[("k4", 1)], ref=False, seq=99),  # absent pair twice
        _copy(by[("k2", 0)], ref=False, key="kX", seq=0),                   # unknown key
        _copy(by[("k0", 5)], **{"op.input": "2:999"}),                    # op.input names no record
        _copy(by[("k2", 1)], **{"op.input": f"{by[('k2', 2)]['partition']}:{by[('k2', 2)]['offset']}"}),
        _copy(by[("k0", 0)], ref=False, seq=None, key="kb"),               # a value without key/seq
        _copy(by[("k3", 6)], batch=9, part=2, attempt=0),                  # aborted attempt's copy: aborted-read
        _copy(by[("k1", 8)], batch=9, part=2, attempt=0, inc="0"),         # same attempt, other incarnation
    ]
    out = _out_frame(copies)
    unc = pd.concat([out, _out_frame([_copy(by[("k2", 7)], batch=9, part=2, attempt=1)]).assign(offset=500)],
                    ignore_index=True)
    history = _history(inp, extra=[
        {"type": "invoke", "f": "send", "key": "k0", "seq": 50},
        {"type": "ok", "f": "send", "key": "k0", "seq": 50, "partition": 0, "offset": 999},   # lost-write
        {"type": "invoke", "f": "send", "key": "k2", "seq": 4},
        {"type": "fail", "f": "send", "key": "k2", "seq": 4, "error": "timed out"},           # failed-write-visible
        {"type": "invoke", "f": "send", "key": "k4", "seq": 60},
        {"type": "info", "f": "send", "key": "k4", "seq": 60}])
    sink = [{"event": "begin", "batch": b, "partition": p, "attempt": 0, "incarnation": "1", "marker": b,
             "time": 1.0 + b} for b in (1, 2, 3) for p in range(PARTS)]
    sink += [{"event": "commit", "batch": b, "partition": p, "attempt": 0, "incarnation": "1", "time": 1.5 + b}
             for b in (1, 2, 3) for p in range(PARTS)]
    sink += [{"event": "begin", "batch": 9, "partition": 2, "attempt": 0, "incarnation": "1", "marker": 9, "time": 9.0},
             {"event": "abort", "batch": 9, "partition": 2, "attempt": 0, "incarnation": "1", "error": "fenced",
              "time": 9.5}]
    live = out.iloc[[0, 1, 2, 3, 3, 4, 5, len(out) - 2]].copy()             # row 3 seen twice; the aborted copy
    live = pd.concat([live, out.iloc[[4]].assign(offset=400)], ignore_index=True)  # one record at two positions
    live["in_ts"] = T0 + np.arange(len(live)) * 7
    live["seen_ms"] = live["in_ts"] + np.array([30, 45, 12, 80, 70, 33, 51, 64, 90])
    nemesis = [{"type": "invoke", "f": "kill-executor", "wall": (T0 + 100) / 1000, "time": 1},
               {"type": "info", "f": "kill-executor", "wall": (T0 + 300) / 1000, "time": 2, "outcome": "effective",
                "target": "executor-1"}]
    d = _write(d, inp=inp, out=out, unc=unc, live=live, history=history, sink=sink, nemesis=nemesis,
               recovery={"finished": True, "reasons": [], "output_lso": {"0": 20, "1": 3},
                         "output_hw": {"0": 20, "1": 4}},
               test={"name": "t", "replay": "onceproof run --seed 1",
                     "config": {"nemesis": ["kill-executor"], "workload": "keyed"},
                     "schedule": [["kill-executor", "-"]]})
    with open(d / "history.jsonl", "a") as f:
        f.write('{"index": 999, "type": "ok", "f": "se')                   # torn last line
    return d


def counting_run(d: Path, spark=None) -> Path:
    """An at-least-once-like run: no op.input (copies paired by (key, seq)), recovery not finished, and a
    history cut short: lost records, but the verdict is unknown. With ``spark``, its snapshots are
    directories of part files. Partition 2's offsets start at 2**25: with part-file row orders (41 bits)
    the positions do not fit a long, so the Spark engine's struct positions are compared too."""
    inp = _input()
    inp["seq"] = inp["seq"].astype("Int64")
    inp.loc[inp["partition"] == 2, "offset"] += 1 << 25   # a partition whose log starts late (retention)
    rows = inp.to_dict("records")
    copies = [_copy(r, ref=False) for r in rows if not (r["key"] == "k2" and r["seq"] in (3, 4))]
    out = _out_frame(copies).drop(columns=["op.input"])
    out.loc[out["partition"] == 2, "offset"] += 1 << 25
    return _write(d, inp=inp, out=out, history=_history(inp, cut=4), spark=spark,
                  recovery={"finished": False, "reasons": ["pipeline did not catch up"], "output_lso": {},
                            "output_hw": {}})


def _both(rd: Path, capsys) -> tuple[tuple[int, dict], tuple[int, dict]]:
    """``onceproof check RUN_DIR --json`` with each engine, in this process (the Spark engine reuses the
    module's session): (exit code, printed result) for pandas, then for spark."""
    out = []
    for extra in ([], ["--engine", "spark"]):
        code = main(["check", str(rd), "--json", *extra])
        out.append((code, json.loads(capsys.readouterr().out)))
    return out[0], out[1]


def _assert_same(p: dict, s: dict) -> None:
    """Equal results; the latency percentiles to 1e-9 (Spark's percentile interpolates in another order)."""
    lp = p["stats"].pop("visibility_latency_ms")
    ls = s["stats"].pop("visibility_latency_ms")
    assert ls == pytest.approx(lp, rel=1e-9)
    for k in sorted(set(p) | set(s)):
        assert s.get(k) == p.get(k), k
    assert json.dumps(s, sort_keys=True) == json.dumps(p, sort_keys=True)


# -------------------------------------------------------------------------------------------------- tests


def test_runs_the_spark_engine_does_not_cover_are_usage_errors(tmp_path):
    """Refused before Spark starts: exit 254, one line naming the fix."""
    counter = _write(tmp_path / "counter", inp=_input(), out=_input(),
                     test={"name": "t", "config": {"workload": "counter", "nemesis": []}})
    fsink = _write(tmp_path / "fsink", inp=_input(), out=_input(),
                   test={"name": "t", "config": {"sink": "file", "nemesis": []}})
    for args, want in (([str(counter)], "counter"), ([str(fsink)], "--sink file"),
                       (["--bootstrap", "127.0.0.1:1", "--workload", "counter"], "counter"),
                       ([str(counter), "--engine", "pandas", "--spark-master", "local[1]"], "--engine spark")):
        if "--engine" not in args:
            args = args + ["--engine", "spark"]
        p = run_cli(["check", *args], timeout=120)
        err = p.stderr.strip()
        assert p.returncode == 254 and "\n" not in err and want in err, (args, p.stdout, p.stderr)
        if "--spark-master" not in args:
            assert "--engine pandas" in err, err


