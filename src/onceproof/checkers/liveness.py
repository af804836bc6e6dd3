"""Liveness: the pipeline not only never duplicates or loses, it also keeps delivering — judged, with
bounds stated and overridable (:class:`Bounds`), beside the safety checkers.

Anomalies (each makes the run ``invalid``):

* ``no-recovery`` – after the last heal, the output did not catch up within ``recovery_s`` seconds: some
  input record appended before the heal was still not visible at read_committed ``recovery_s`` after it
  (judged once the during-faults reader ran that long past the heal; else the stats say why not).
* ``hanging-transaction`` – an output partition's last stable offset stayed at one offset, below its
  high watermark, outside every fault window, for longer than ``transaction.timeout.ms`` plus
  ``hang_margin_s``: a transaction nobody finishes or aborts (Kafka's KIP-664 "hanging transactions";
  Kafka Streams' EOS system test checks ``verifyAllTransactionFinished`` the same way). The broker's
  own timeout aborts an open transaction within ``transaction.timeout.ms`` plus
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s by default), so a correct
  pipeline's LSO never stays pinned that long.
* ``leftover-transaction`` – a transaction open before the driver's restart (a pin already there a
  sample before the restarted query's start, which follows a kill) still held an output partition's
  LSO more than ``leftover_s`` seconds after that start: the
  restarted pipeline did not settle what its dead predecessor left open (Flink's abort-on-restore), so
  read_committed readers stall until a replayed task or ``transaction.timeout.ms`` ends it. Judged from
  the LSO samples, the kills' times (``killed_at`` in the nemesis ops' evidence) and the query starts
  the pipeline announces (``control/driver.apps.jsonl``, the bundled job's; a ``--pipeline-cmd`` job
  announces none and is not judged).
* ``late-visibility`` – an input record became visible at read_committed more than ``visibility_s``
  seconds after it was appended to the input (``seen_ms - in_ts`` of the during-faults reader), not counting
  the time fault windows covered of that wait (as ``hanging-transaction`` does): nothing becomes visible
  while a fault holds the driver down (a kill, an upgrade's restart), and that wait is the fault's; the
  catch-up after the window is the pipeline's and is counted.

Statistics, whether or not anything is anomalous: recovery time after each effective fault (s, from its
window's end until every input record appended before it that the reader saw was visible: the
catch-up), the visibility latency p50/p99/max (ms, from ``checkers/transactions.live_view``) and the
longest LSO pin per partition (s).

Inputs are the during-faults reader's frame (``clients/live_reader.py``: partition, offset, in_ts,
seen_ms), the LSO samples (``clients/lso_sampler.py``: t_ms, partition, lso, hw) and the nemesis ops'
fault windows (``checkers/nearby.fault_windows``). A run without a reader (a file sink) gets no
liveness verdict: ``stats["judged"]`` is false with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from onceproof.checkers import nearby

ANOMALIES = ("no-recovery", "hanging-transaction", "leftover-transaction", "late-visibility")
MAX_EXAMPLES = 10
SAMPLE_MS = 1000  # the LSO sampler's interval (clients/lso_sampler.py INTERVAL_S): a pin's start is known to it
DEFAULT_USER_TXN_TIMEOUT_MS = 60000
"""A ``--pipeline-cmd`` job's ``transaction.timeout.ms`` when not told: the Kafka producer's default
(https://kafka.apache.org/documentation/#producerconfigs_transaction.timeout.ms; librdkafka's too)."""


@dataclass(frozen=True)
class Bounds:
    """The liveness bounds (s) and the ``transaction.timeout.ms`` (ms) the hang bound is counted from."""

    recovery_s: float = 120.0
    visibility_s: float = 180.0
    hang_margin_s: float = 30.0
    txn_timeout_ms: int = 30000
    leftover_s: float = 5.0

    @property
    def hang_s(self) -> float:
        """An LSO pinned longer than this (s, outside fault windows) is a hanging transaction."""
        return self.txn_timeout_ms / 1000 + self.hang_margin_s

    @classmethod
    def of(cls, config: dict) -> Bounds:
        """The bounds a run's stored config (``test.json``'s ``config``) sets; defaults for what it lacks.
        A ``--pipeline-cmd`` job's timeout is :data:`DEFAULT_USER_TXN_TIMEOUT_MS` (its own producer's
        setting is not known to the harness)."""
        d = cls()
        timeout = DEFAULT_USER_TXN_TIMEOUT_MS if config.get("pipeline_cmd") else \
            int(config.get("txn_timeout_ms") or d.txn_timeout_ms)
        return cls(recovery_s=float(config.get("recovery_bound") or d.recovery_s),
                   visibility_s=float(config.get("visibility_bound") or d.visibility_s),
                   hang_margin_s=float(config.get("hang_margin") if config.get("hang_margin") is not None
                                       else d.hang_margin_s),
                   txn_timeout_ms=timeout, leftover_s=float(config.get("leftover_bound") or d.leftover_s))


def check(live: pd.DataFrame | None, lso: pd.DataFrame | None, nemesis: pd.DataFrame | None,
          bounds: Bounds = Bounds(), driver_starts: list[float] | None = None,
          input_ms: np.ndarray | None = None) -> dict:
    """Judge liveness. ``live``: the during-faults reader's distinct output positions, first sightings
    (``transactions.distinct_positions`` of its rows; columns partition, offset, in_ts, seen_ms).
    ``driver_starts``: epoch s at which each driver's query started (``None``: the
    pipeline does not say). ``input_ms``: every input record's append time (epoch ms; the input topic's
    Kafka timestamps), so that records never seen count against the recovery (``None``: only what the
    reader saw is known). Returns ``{"counts": {anomaly: n}, "anomalies": {anomaly: [examples]},
    "stats": {"judged", "not_judged", "bounds", "recoveries", "last_heal_recovery_s",
    "visibility_outside_faults_max_s", "lso_pin_max_s", "lso_samples"}}`` (see the module docstring).
    ``visibility_outside_faults_max_s`` is the worst record's latency minus the fault windows it overlapped
    (what the visibility bound is compared with; s, ``None`` without sightings): the evidence for where to
    set the bound."""
    counts = {a: 0 for a in ANOMALIES}
    anomalies: dict[str, list] = {a: [] for a in ANOMALIES}
    stats: dict = {"judged": False, "not_judged": [], "bounds": {
        "recovery_s": bounds.recovery_s, "visibility_s": bounds.visibility_s, "hang_s": bounds.hang_s,
        "txn_timeout_ms": bounds.txn_timeout_ms, "leftover_s": bounds.leftover_s}}
    windows = nearby.fault_windows(nemesis)
    seen = _first_sightings(live)
    if seen is None:
        stats["not_judged"].append("no during-faults reader (a sink that is not a Kafka topic)")
    else:
        stats["judged"] = True
        watched_until = float(lso["t_ms"].max()) / 1000 if lso is not None and not lso.empty else None
        _recovery(seen, windows, _heals(nemesis), input_ms, bounds, counts, anomalies, stats, watched_until)
        _visibility(seen, windows, bounds, counts, anomalies, stats)
    pins = _pins_by_partition(lso)
    _hangs(pins, lso, windows, bounds, counts, anomalies, stats)
    _leftovers(pins, _kills(nemesis), driver_starts, bounds, counts, anomalies, stats)
    return {"counts": counts, "anomalies": anomalies, "stats": stats}


def _kills(nemesis: pd.DataFrame | None) -> list[float]:
    """Epoch s of every driver kill the nemesis ops record (``killed_at`` in an op's evidence)."""
    if nemesis is None or nemesis.empty or "evidence" not in nemesis:
        return []
    return sorted(float(e["killed_at"]) for e in nemesis["evidence"]
                  if isinstance(e, dict) and isinstance(e.get("killed_at"), (int, float)))


def _pins_by_partition(lso: pd.DataFrame | None) -> dict[int, list[tuple[float, float, int, int]]]:
    """Every output partition's pins (:func:`pin_runs`) in the LSO samples; empty without samples."""
    if lso is None or lso.empty:
        return {}
    return {int(p): pin_runs(g["t_ms"].to_numpy(), g["lso"].to_numpy(), g["hw"].to_numpy())
            for p, g in lso.sort_values(["partition", "t_ms"], kind="stable").groupby("partition", sort=True)}


def _leftovers(pins: dict[int, list], kills: list[float], starts: list[float] | None, bounds: Bounds,
               counts: dict, anomalies: dict, stats: dict) -> None:
    """A query start that follows a kill: any LSO pin already there a sample before that start (so a
    transaction of the dead driver: the new one's first batch begins after its start is announced) and
    still there ``leftover_s`` after it."""
    if not kills:
        return
    if not starts:
        stats["not_judged"].append("leftover-transaction: the pipeline announces no query starts "
                                   "(a --pipeline-cmd job)")
        return
    if not pins:
        return
    starts = sorted(starts)
    restarts = [(max(k for k in kills if prev < k < r), r) for prev, r in zip([float("-inf"), *starts], starts)
                if any(prev < k < r for k in kills)]
    found = []
    for p, runs in pins.items():
        for t0, t1, at, _hw in runs:
            hit = next(((k, r) for k, r in restarts
                        if t0 <= r * 1000 - SAMPLE_MS and t1 - r * 1000 > bounds.leftover_s * 1000), None)
            if hit is not None:
                k, r = hit
                found.append({"partition": p, "lso": int(at), "pinned_from_ms": int(t0), "to_ms": int(t1),
                              "killed_at": k, "query_started_at": r,
                              "pinned_after_start_s": round((t1 - r * 1000) / 1000, 3),
                              "bound_s": bounds.leftover_s})
    counts["leftover-transaction"] = len(found)
    anomalies["leftover-transaction"] = sorted(found, key=lambda x: -x["pinned_after_start_s"])[:MAX_EXAMPLES]

def _first_sightings(live: pd.DataFrame | None) -> pd.DataFrame | None:
    """The reader's distinct positions as float columns: partition, offset, in_ts, seen_ms (ms)."""
    if live is None or not {"partition", "offset", "in_ts", "seen_ms"} <= set(live.columns):
        return None
    return pd.DataFrame({"partition": live["partition"].to_numpy(), "offset": live["offset"].to_numpy(),
                         "in_ts": pd.to_numeric(live["in_ts"], errors="coerce").to_numpy(dtype=float),
                         "seen_ms": pd.to_numeric(live["seen_ms"], errors="coerce").to_numpy(dtype=float)})


def _heals(nemesis: pd.DataFrame | None) -> list[float]:
    """Epoch s of the nemesis's explicit heals (the final ``heal`` op's completion)."""
    if nemesis is None or nemesis.empty or "f" not in nemesis or "wall" not in nemesis:
        return []
    h = nemesis[(nemesis["f"] == "heal") & (nemesis.get("type", "info") != "invoke")]
    return [float(w) for w in pd.to_numeric(h["wall"], errors="coerce").dropna()]


def _caught_up_s(seen: pd.DataFrame, heal_s: float, input_ms: np.ndarray | None) -> tuple[float | None, int]:
    """After a heal at ``heal_s`` (epoch s): seconds until every record appended before it that the reader
    saw was visible (0 when all were before the heal), and how many records appended before it the reader
    never saw (from ``input_ms``; 0 without it). The seconds are ``None`` when records are unseen."""
    h = heal_s * 1000
    before = seen["seen_ms"].to_numpy()[seen["in_ts"].to_numpy() < h]
    unseen = 0 if input_ms is None else max(0, int(np.count_nonzero(input_ms < h)) - len(before))
    if unseen:
        return None, unseen
    return (round(max(0.0, float(before.max()) - h) / 1000, 3) if len(before) else 0.0), 0


def _recovery(seen: pd.DataFrame, windows: pd.DataFrame, heals: list[float], input_ms: np.ndarray | None,
              bounds: Bounds, counts: dict, anomalies: dict, stats: dict, watched_until: float | None = None) -> None:
    """no-recovery after the last heal. The reader's last sighting bounds how long the output was watched;
    when it saw nothing after the heal, ``watched_until`` (epoch s: the LSO sampler's last sample, taken
    until the check) does: an output that stayed silent that long after the heal did not recover."""
    stats["recoveries"] = [{"f": w.f, "target": w.target, "healed_s": float(w.end_s),
                            "recovery_s": _caught_up_s(seen, float(w.end_s), input_ms)[0]}
                           for w in windows.itertuples()]
    ends = [float(e) for e in windows["end_s"]] + heals
    if not ends:
        stats["last_heal_recovery_s"] = None
        stats["not_judged"].append("no-recovery: no fault was healed")
        return
    last = max(ends)
    rec, unseen = _caught_up_s(seen, last, input_ms)
    stats["last_heal_recovery_s"] = rec
    reader_until_s = float(np.nanmax(seen["seen_ms"])) / 1000 if len(seen) else last
    if rec is None and watched_until is not None:
        reader_until_s = max(reader_until_s, watched_until)
    if rec is not None and rec <= bounds.recovery_s:
        return
    if rec is None and reader_until_s - last < bounds.recovery_s:
        stats["not_judged"].append(f"no-recovery: {unseen} records appended before the last heal were not "
                                   f"seen, and the reader stopped {reader_until_s - last:.0f} s after it, "
                                   f"before the {bounds.recovery_s:g} s bound")
        return
    counts["no-recovery"] = 1
    anomalies["no-recovery"].append({"healed_s": last, "recovery_s": rec, "unseen_records": unseen,
                                     "bound_s": bounds.recovery_s, "reader_until_s": round(reader_until_s, 3)})


def _merged_spans_ms(windows: pd.DataFrame) -> list[tuple[float, float]]:
    """The fault windows (epoch s) as disjoint, sorted ``(start_ms, end_ms)`` spans."""
    spans = sorted((float(s) * 1000, float(e) * 1000) for s, e in zip(windows["start_s"], windows["end_s"]))
    out: list[tuple[float, float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _visibility(seen: pd.DataFrame, windows: pd.DataFrame, bounds: Bounds, counts: dict, anomalies: dict,
                stats: dict) -> None:
    """``late-visibility``: latency from append to first sighting, minus the time fault windows covered of it
    (the wait a fault imposes, e.g. a driver down for an upgrade, is the fault's; the catch-up after it is
    the pipeline's), above the bound. Vectorised over the records; the windows are few."""
    in_ms = seen["in_ts"].to_numpy("float64")
    seen_ms = seen["seen_ms"].to_numpy("float64")
    inside = np.zeros(len(seen))
    for s, e in _merged_spans_ms(windows):
        inside += np.clip(np.minimum(seen_ms, e) - np.maximum(in_ms, s), 0, None)
    lat_s = pd.Series((seen_ms - in_ms) / 1000, index=seen.index)
    outside_s = pd.Series((seen_ms - in_ms - inside) / 1000, index=seen.index)
    worst = outside_s.max()  # NaN when no record has both times
    stats["visibility_outside_faults_max_s"] = None if pd.isna(worst) else round(float(worst), 3)
    late = seen[outside_s > bounds.visibility_s]
    late = late.assign(latency_s=lat_s[late.index], outside_faults_s=outside_s[late.index])
    counts["late-visibility"] = int(len(late))
    worst = late.sort_values("outside_faults_s", ascending=False, kind="stable").head(MAX_EXAMPLES)
    anomalies["late-visibility"] = [
        {"partition": int(r.partition), "offset": int(r.offset), "in_ts": int(r.in_ts), "seen_ms": int(r.seen_ms),
         "latency_s": round(float(r.latency_s), 3), "outside_faults_s": round(float(r.outside_faults_s), 3),
         "bound_s": bounds.visibility_s}
        for r in worst.itertuples()]


def _hangs(pins: dict[int, list], lso: pd.DataFrame | None, windows: pd.DataFrame, bounds: Bounds, counts: dict,
           anomalies: dict, stats: dict) -> None:
    """Pins longer than the hang bound outside every fault window (``hanging-transaction``)."""
    if lso is None or lso.empty:
        stats["lso_samples"] = 0
        stats["lso_pin_max_s"] = {}
        stats["not_judged"].append("hanging-transaction: no LSO samples")
        return
    stats["lso_samples"] = int(lso["t_ms"].nunique())
    spans = [(float(s) * 1000, float(e) * 1000) for s, e in zip(windows["start_s"], windows["end_s"])]
    found, pin_max = [], {}
    for p, runs in pins.items():
        for t0, t1, at, hw in runs:
            outside = (t1 - t0 - _overlap_ms(t0, t1, spans)) / 1000
            pin_max[p] = max(pin_max.get(p, 0.0), round((t1 - t0) / 1000, 3))
            if outside > bounds.hang_s:
                found.append({"partition": p, "lso": int(at), "hw": int(hw), "from_ms": int(t0),
                              "to_ms": int(t1), "pinned_s": round((t1 - t0) / 1000, 3),
                              "outside_faults_s": round(outside, 3), "bound_s": bounds.hang_s})
    stats["lso_pin_max_s"] = pin_max
    counts["hanging-transaction"] = len(found)
    anomalies["hanging-transaction"] = sorted(found, key=lambda x: -x["outside_faults_s"])[:MAX_EXAMPLES]


def pin_runs(t_ms: np.ndarray, lso: np.ndarray, hw: np.ndarray) -> list[tuple[float, float, int, int]]:
    """One partition's samples (sorted by time) → its pins ``(from_ms, to_ms, lso, hw at the end)``:
    maximal runs of consecutive samples with one LSO value below the HW. The LSO only grows, so equal
    values at both ends of a run mean it stayed there in between, gaps in sampling included."""
    out = []
    i, n = 0, len(t_ms)
    while i < n:
        if lso[i] >= hw[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and lso[j + 1] == lso[i] and lso[j + 1] < hw[j + 1]:
            j += 1
        if j > i:
            out.append((float(t_ms[i]), float(t_ms[j]), int(lso[i]), int(hw[j])))
        i = j + 1
    return out


def _overlap_ms(t0: float, t1: float, spans: list[tuple[float, float]]) -> float:
    """Milliseconds of [t0, t1] covered by the union of ``spans``."""
    cut = sorted((max(t0, s), min(t1, e)) for s, e in spans if e > t0 and s < t1)
    total, end = 0.0, t0
    for s, e in cut:
        s = max(s, end)
        if e > s:
            total += e - s
            end = e
    return total
