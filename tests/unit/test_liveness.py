"""The liveness checker (``checkers/liveness.py``) on synthetic reader views, LSO samples and nemesis
ops: pure logic, no cluster."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from onceproof.checkers import compose, liveness
from onceproof.checkers.liveness import Bounds

T0 = 1_800_000_000.0  # epoch s


def _nemesis(*windows: tuple[str, float, float], heal_at: float | None = None) -> pd.DataFrame:
    """Nemesis ops: an effective fault per (f, start, end) window (epoch s), and a final heal."""
    rows, i = [], 0
    for f, s, e in windows:
        rows += [{"index": i, "type": "invoke", "f": f, "wall": s},
                 {"index": i + 1, "type": "info", "f": f, "wall": e, "outcome": "effective", "target": "n1"}]
        i += 2
    if heal_at is not None:
        rows += [{"index": i, "type": "invoke", "f": "heal", "wall": heal_at},
                 {"index": i + 1, "type": "info", "f": "heal", "wall": heal_at, "outcome": "healed"}]
    return pd.DataFrame(rows)


def _live(in_s: np.ndarray, delay_s: np.ndarray | float) -> pd.DataFrame:
    """The reader's view: one record per input append time ``in_s`` (epoch s), seen ``delay_s`` later."""
    in_ms = (np.asarray(in_s) * 1000).astype("int64")
    seen = in_ms + (np.broadcast_to(delay_s, in_ms.shape) * 1000).astype("int64")
    n = len(in_ms)
    return pd.DataFrame({"partition": np.zeros(n, "int64"), "offset": np.arange(n), "key": "k",
                         "seq": np.arange(n), "in_ts": in_ms, "seen_ms": seen})


def _samples(pin_from: float, pin_to: float, lso_at: int = 100) -> pd.DataFrame:
    """1 Hz LSO/HW samples of partition 0 from T0 to T0+200 s; between ``pin_from`` and ``pin_to`` (s
    after T0) the LSO stays at ``lso_at`` while the HW grows; elsewhere LSO = HW. Partition 1 never pins."""
    rows = []
    for k in range(201):
        t_ms = int((T0 + k) * 1000)
        hw = 10 * k + 500
        pinned = pin_from <= k <= pin_to
        rows.append((t_ms, 0, lso_at if pinned else hw, hw))
        rows.append((t_ms, 1, hw, hw))
    return pd.DataFrame(rows, columns=["t_ms", "partition", "lso", "hw"])


def test_a_pin_is_a_run_of_one_lso_below_the_high_watermark():
    t = np.array([0, 1000, 2000, 3000, 4000, 5000])
    lso = np.array([5, 7, 7, 7, 9, 12])
    hw = np.array([5, 9, 11, 12, 12, 12])
    assert liveness.pin_runs(t, lso, hw) == [(1000.0, 3000.0, 7, 12)]
    # one sample below the HW is no run: nothing is known of how long it lasted
    assert liveness.pin_runs(np.array([0, 1000]), np.array([5, 6]), np.array([6, 6])) == []


def test_an_lso_pinned_past_the_transaction_timeout_outside_faults_is_a_hanging_transaction():
    bounds = Bounds(txn_timeout_ms=30000, hang_margin_s=30)
    r = liveness.check(None, _samples(20, 120), _nemesis(), bounds)
    assert r["counts"]["hanging-transaction"] == 1
    (ex,) = r["anomalies"]["hanging-transaction"]
    assert ex["partition"] == 0 and ex["lso"] == 100 and ex["pinned_s"] == 100 and ex["bound_s"] == 60
    assert r["stats"]["lso_pin_max_s"] == {0: 100.0}


@pytest.mark.parametrize("pin,windows,why", [
    ((20, 70), (), "50 s: under timeout + margin"),
    ((20, 120), (("pause-broker", T0 + 10, T0 + 60),), "100 s, of which 40 s inside a fault window"),
])
def test_a_pin_under_the_bound_or_inside_a_fault_is_no_anomaly(pin, windows, why):
    r = liveness.check(None, _samples(*pin), _nemesis(*windows), Bounds(txn_timeout_ms=30000, hang_margin_s=30))
    assert r["counts"]["hanging-transaction"] == 0, why
    assert r["stats"]["lso_pin_max_s"][0] == pin[1] - pin[0]


def test_recovery_after_each_fault_is_the_catch_up_and_a_quick_one_is_no_anomaly():
    in_s = T0 + np.arange(0, 200, 0.5)
    # input appended between T0+50 and T0+68 is seen only at T0+68 (the fault healed at T0+60)
    delay = np.where((in_s > T0 + 50) & (in_s < T0 + 68), T0 + 68 - in_s, 2.0)
    r = liveness.check(_live(in_s, delay), None, _nemesis(("kill-driver", T0 + 50, T0 + 60)), Bounds(),
                       input_ms=in_s * 1000)
    assert r["counts"]["no-recovery"] == 0 and r["stats"]["judged"]
    (rec,) = r["stats"]["recoveries"]
    assert rec["f"] == "kill-driver" and rec["recovery_s"] == pytest.approx(8.0, abs=0.01)
    assert r["stats"]["last_heal_recovery_s"] == pytest.approx(8.0, abs=0.01)


def test_input_from_before_the_last_heal_still_unseen_past_the_bound_is_no_recovery():
    in_s = T0 + np.arange(0, 300, 1.0)
    live = _live(in_s, 1.0)
    live = live[(live["in_ts"] < (T0 + 90) * 1000) | (live["in_ts"] >= (T0 + 100) * 1000)]  # T0+90..99 never seen
    r = liveness.check(live, None, _nemesis(("partition", T0 + 90, T0 + 100)), Bounds(recovery_s=120),
                       input_ms=in_s * 1000)
    assert r["counts"]["no-recovery"] == 1
    (ex,) = r["anomalies"]["no-recovery"]
    assert ex["recovery_s"] is None and ex["unseen_records"] == 10 and ex["healed_s"] == T0 + 100


def test_a_slow_catch_up_past_the_bound_is_no_recovery():
    in_s = T0 + np.arange(0, 300, 1.0)
    delay = np.where(in_s < T0 + 100, T0 + 250 - in_s, 1.0)  # everything before the heal seen at T0+250
    r = liveness.check(_live(in_s, delay), None, _nemesis(("partition", T0 + 90, T0 + 100)), Bounds(recovery_s=120),
                       input_ms=in_s * 1000)
    assert r["counts"]["no-recovery"] == 1 and r["anomalies"]["no-recovery"][0]["recovery_s"] == 150


def test_a_reader_that_stopped_before_the_bound_leaves_recovery_unjudged():
    in_s = T0 + np.arange(0, 100, 1.0)
    live = _live(in_s[in_s < T0 + 95], 1.0)  # the last 5 s of input never seen; the reader's end: T0+95
    r = liveness.check(live, None, _nemesis(("partition", T0 + 90, T0 + 99.5)), Bounds(recovery_s=120),
                       input_ms=in_s * 1000)
    assert r["counts"]["no-recovery"] == 0
    assert any("before the 120 s bound" in w for w in r["stats"]["not_judged"]), r["stats"]


def test_a_record_visible_later_than_the_bound_is_late_visibility():
    in_s = T0 + np.arange(0, 100, 1.0)
    delay = np.where(np.arange(100) % 25 == 0, 200.0, 1.5)
    r = liveness.check(_live(in_s, delay), None, None, Bounds(visibility_s=180))
    assert r["counts"]["late-visibility"] == 4
    assert {e["latency_s"] for e in r["anomalies"]["late-visibility"]} == {200.0}


def test_the_wait_a_fault_window_covers_is_not_counted_against_visibility():
    """Two records appended at T0 and seen 200 s and 250 s later; a driver-down window covers 60 s of each
    wait: 140 s outside faults is within the 180-s bound, 190 s is not."""
    live = _live(np.array([T0, T0 + 1.0]), np.array([200.0, 250.0]))
    r = liveness.check(live, None, _nemesis(("upgrade", T0 + 10, T0 + 70)), Bounds(visibility_s=180))
    assert r["counts"]["late-visibility"] == 1
    (ex,) = r["anomalies"]["late-visibility"]
    assert (ex["latency_s"], ex["outside_faults_s"]) == (250.0, 190.0)
    assert r["stats"]["visibility_outside_faults_max_s"] == 190.0  # what a bound would be set from
    # overlapping windows are counted once: [10, 70] and [40, 80] cover 70 s, leaving 180 s (not above the bound)
    r = liveness.check(live, None, _nemesis(("upgrade", T0 + 10, T0 + 70), ("kill-broker", T0 + 40, T0 + 80)),
                       Bounds(visibility_s=179.5))
    assert [e["outside_faults_s"] for e in r["anomalies"]["late-visibility"]] == [180.0]


def test_a_liveness_anomaly_makes_the_verdict_invalid_and_its_stats_are_kept():
    base = {"verdict": "valid", "valid": True, "counts": {}, "anomalies": {}, "stats": {}}
    out = pd.DataFrame({"partition": [0], "offset": [0], "key": ["k"], "seq": [0]})
    lv = liveness.check(None, _samples(20, 120), None, Bounds())
    r = compose.combine(base, output=out, live_check=lv)
    assert r["verdict"] == "invalid" and r["counts"]["hanging-transaction"] == 1
    assert r["stats"]["liveness"]["bounds"]["hang_s"] == 60
    quiet = compose.combine(base, output=out, live_check=liveness.check(None, _samples(20, 40), None, Bounds()))
    assert quiet["verdict"] == "valid"


def test_the_bounds_come_from_a_runs_config_and_a_user_job_gets_kafkas_default_timeout():
    assert Bounds.of({"txn_timeout_ms": 20000, "hang_margin": 0}).hang_s == 20
    assert Bounds.of({"pipeline_cmd": "python job.py", "txn_timeout_ms": 20000}).txn_timeout_ms == 60000
    assert Bounds.of({}) == Bounds()


def _base(**counts) -> dict:
    c = {"duplicate": 0, "lost": 0, "input-duplicate": 0, "lost-write": 0, **counts}
    return {"verdict": "invalid" if any(c.values()) else "valid", "counts": c, "anomalies": {}, "stats": {},
            "definite": ["duplicate", "input-duplicate", "lost-write"]}


def test_the_input_logs_anomalies_are_platform_findings_outside_the_verdict_unless_strict():
    out = pd.DataFrame({"partition": [0], "offset": [0], "key": ["k"], "seq": [0]})
    r = compose.combine(_base(**{"input-duplicate": 1200}), output=out)
    assert r["verdict"] == "valid" and r["platform_findings"]["counts"] == {"input-duplicate": 1200}
    assert "librdkafka#4953" in r["platform_findings"]["suspected"]["input-duplicate"]
    assert "input-duplicate" not in r["definite"]
    strict = compose.combine(_base(**{"input-duplicate": 1200}), output=out, strict=True)
    assert strict["verdict"] == "invalid" and strict["platform_findings"]["strict"]
    # the pipeline's own anomaly still decides, and a lost record too
    both = compose.combine(_base(**{"lost-write": 2, "duplicate": 1}), output=out)
    assert both["verdict"] == "invalid" and both["platform_findings"]["counts"] == {"lost-write": 2}
    lost = compose.combine(_base(**{"input-duplicate": 3, "lost": 5}), output=out)
    assert lost["verdict"] == "invalid"
    clean = compose.combine(_base(), output=out)
    assert clean["verdict"] == "valid" and "platform_findings" not in clean


def test_a_platform_only_invalid_with_unfinished_recovery_is_unknown():
    out = pd.DataFrame({"partition": [0], "offset": [0], "key": ["k"], "seq": [0]})
    base = {**_base(**{"input-duplicate": 4}), "unknown_reasons": ["recovery did not finish"]}
    r = compose.combine(base, output=out)
    assert r["verdict"] == "unknown" and r["unknown_reasons"] == ["recovery did not finish"]


def _kill_ops(*killed_at: float) -> pd.DataFrame:
    rows = []
    for i, k in enumerate(killed_at):
        rows += [{"index": 2 * i, "type": "invoke", "f": "restart-mid-txn", "wall": k - 1},
                 {"index": 2 * i + 1, "type": "info", "f": "restart-mid-txn", "wall": k + 60,
                  "outcome": "effective", "target": "driver", "evidence": {"killed_at": k}}]
    return pd.DataFrame(rows)


def test_a_transaction_open_at_a_kill_that_outlives_the_next_query_start_is_a_leftover():
    # partition 0 pinned at 100 from T0+20 to T0+120; the driver killed at T0+25, its successor started at T0+45
    r = liveness.check(None, _samples(20, 120), _kill_ops(T0 + 25), Bounds(), driver_starts=[T0, T0 + 45])
    assert r["counts"]["leftover-transaction"] == 1
    (ex,) = r["anomalies"]["leftover-transaction"]
    assert ex["partition"] == 0 and ex["pinned_after_start_s"] == 75 and ex["query_started_at"] == T0 + 45


def test_a_pin_first_seen_just_after_the_kill_but_before_the_restart_is_a_leftover():
    """The sampler sees a pin up to a second late: a transaction flushed just before the kill shows first
    in the sample after it, still well before the restarted query starts."""
    r = liveness.check(None, _samples(26, 120), _kill_ops(T0 + 25.5), Bounds(), driver_starts=[T0, T0 + 45])
    assert r["counts"]["leftover-transaction"] == 1


@pytest.mark.parametrize("pin,kill,starts,why", [
    ((20, 47), T0 + 25, [T0, T0 + 45], "settled 2 s after the start: within the 5 s bound"),
    ((46, 120), T0 + 25, [T0, T0 + 45], "the pin began after the query start: the new driver's transaction"),
    ((20, 120), T0 + 25, [T0], "no query started after the kill"),
])
def test_a_leftover_settled_at_start_or_not_from_the_dead_driver_is_no_anomaly(pin, kill, starts, why):
    r = liveness.check(None, _samples(*pin), _kill_ops(kill), Bounds(), driver_starts=starts)
    assert r["counts"]["leftover-transaction"] == 0, why


def test_a_pipeline_that_announces_no_starts_is_not_judged_for_leftovers():
    r = liveness.check(None, _samples(20, 120), _kill_ops(T0 + 25), Bounds(), driver_starts=None)
    assert r["counts"]["leftover-transaction"] == 0
    assert any(w.startswith("leftover-transaction") for w in r["stats"]["not_judged"])


def test_an_output_that_stayed_silent_after_the_heal_while_watched_past_the_bound_is_no_recovery():
    """A query that stopped for good (a source failing on deleted input): the reader saw nothing after the
    heal at T0+20, and the LSO sampler watched the output until T0+200: past the 120 s bound, no-recovery;
    watched only until T0+60, not judged."""
    in_s = T0 + np.arange(0, 40, 1.0)
    live = _live(in_s[in_s < T0 + 10], 1.0)  # seen until T0+11, then nothing
    nem = _nemesis(("delete-input-records", T0 + 15, T0 + 20))
    r = liveness.check(live, _samples(999, 999), nem, Bounds(recovery_s=120), input_ms=in_s * 1000)
    assert r["counts"]["no-recovery"] == 1, r["stats"]
    short = _samples(999, 999)
    short = short[short["t_ms"] <= (T0 + 60) * 1000]
    assert liveness.check(live, short, nem, Bounds(recovery_s=120), input_ms=in_s * 1000)["counts"]["no-recovery"] == 0


def test_an_input_duplicate_with_one_create_time_is_named_a_client_resend():
    from onceproof.checkers.platform import duplicate_origin

    ex = [{"key": "k49", "seq": 675, "inputs": [{"partition": 5, "offset": 6573}, {"partition": 5, "offset": 6574}],
           "nemesis_nearby": [{"f": "reassign-partitions:input", "dt_s": 0.0}]}]
    same = {(5, 6573): 1795851848195, (5, 6574): 1795851848195}
    text = duplicate_origin(ex, same, "at-most-once")
    assert "resent a produce request despite message.send.max.retries=0" in text and "reassign-partitions" in text
    assert duplicate_origin(ex, {**same, (5, 6574): 1795851848999}, "at-most-once") is None  # two sends' times
    assert duplicate_origin(ex, {(5, 6573): 1}, "idempotent") is None  # a copy's time unknown


def test_the_run_line_gives_the_worst_visibility_outside_faults_against_its_bound():
    from onceproof.harness.summary import liveness_line

    live = _live(np.array([T0, T0 + 1.0]), np.array([200.0, 250.0]))
    r = liveness.check(live, None, _nemesis(("upgrade", T0 + 10, T0 + 70)), Bounds(visibility_s=180))
    line = liveness_line({"liveness": r["stats"], "visibility_latency_ms": {"p50": 1, "p99": 2, "max": 3}})
    assert "worst outside faults 190 s of a 180 s bound" in line, line


def test_output_without_input_times_has_no_visibility_figure():
    """A user's job whose records carry no input timestamp (``in_ts`` null): no latency, no figure (not NaN)."""
    live = _live(T0 + np.arange(0, 10, 1.0), 1.0).assign(in_ts=np.nan)
    r = liveness.check(live, None, None, Bounds(visibility_s=180))
    assert r["stats"]["visibility_outside_faults_max_s"] is None and r["counts"]["late-visibility"] == 0
