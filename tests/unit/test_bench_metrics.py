"""bench/pipeline_bench.py's metrics on synthetic append times: a transactional sink's bursty output is
measured over the backlog window (not per-second medians, which a burst every few seconds makes 0), a
pipeline that keeps up is reported as not saturated, and latency excludes the start-up backlog."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import pipeline_bench  # noqa: E402

T0 = 1_000_000


def _input(rate_per_s: int, seconds: int) -> np.ndarray:
    return (np.arange(rate_per_s * seconds) * (1000 / rate_per_s)).astype("int64") + T0


def test_bursty_transactional_output_is_measured_over_the_backlog_window():
    i = _input(4000, 60)
    o, done, t = [], 0, 20_000
    while done < len(i):  # 15,000 records committed every 5 s: 3,000 records/s, behind a 4,000/s input
        take = min(np.searchsorted(i, T0 + t) - done, 15_000)
        o += [T0 + t] * take
        done, t = done + take, t + 5000
    r = pipeline_bench.throughput(pd.DataFrame({"timestamp": o, "in_ts": i[:len(o)]}),
                                  pd.DataFrame({"timestamp": i}), 4000)
    assert r["records_per_s"] == 3000.0 and r["saturated"], r
    assert round(r["input_per_s"]) == 4000


def test_a_pipeline_that_keeps_up_is_not_saturated():
    i = _input(1000, 60)
    r = pipeline_bench.throughput(pd.DataFrame({"timestamp": i + 800, "in_ts": i}),
                                  pd.DataFrame({"timestamp": i}), 1000)
    assert not r["saturated"] and r["peak_backlog"] < 1000, r


def test_latency_skips_the_start_up_backlog():
    i = _input(300, 90)
    out = i + 1500
    out[: 300 * 20] = T0 + 20_000 + 1500  # the first 20 s of input come out together after start-up
    r = pipeline_bench.latency(pd.DataFrame({"timestamp": out, "in_ts": i}), warmup_s=20)
    assert r["p99_s"] == 1.5 and r["max_s"] == 1.5, r
