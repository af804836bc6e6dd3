"""Glue between the topics and the pure checkers: read, save, check.

``check_live`` reads the input topic and the output topic at read_committed (after recovery) and the
output at read_uncommitted, saves them as ``input.parquet`` / ``output.parquet`` /
``output_uncommitted.parquet`` in the run directory, and runs ``checkers.exactly_once`` composed with
``checkers.transactions`` (aborted reads against ``sink.jsonl``, stuck partitions, the during-faults
reader's ``live.parquet``). ``check_saved`` re-runs the same checks offline on a stored run directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from checkers import compose, nearby
from checkers.exactly_once import Recovery, check
from harness import history, topics
from harness.recovery import RecoveryStatus


class CheckError(RuntimeError):
    """The data needed for a check is missing or unreadable."""


def read_pair(bootstrap: str, input_topic: str, output_topic: str, timeout_s: float = 300.0
              ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, list[str]]:
    """Read input (read_committed), output (read_committed) and output (read_uncommitted) into checker
    frames; also returns incompleteness reasons."""
    reasons = []
    inp = topics.read_topic(bootstrap, input_topic, committed=True, timeout_s=timeout_s, with_headers=False)
    out = topics.read_topic(bootstrap, output_topic, committed=True, timeout_s=timeout_s, with_headers=True)
    unc = topics.read_topic(bootstrap, output_topic, committed=False, timeout_s=timeout_s, with_headers=True)
    for name, r in ((input_topic, inp), (output_topic, out)):
        if not r.complete:
            reasons.append(f"reading {name} did not reach its end offsets within {timeout_s:.0f}s")
    return (topics.decode_values(inp.frame), topics.decode_values(out.frame), topics.decode_values(unc.frame),
            reasons)


def _save(frame: pd.DataFrame, path: Path) -> None:
    frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object}).to_parquet(path, index=False)


def read_sink_log(run_dir: Path | None) -> pd.DataFrame:
    """``sink.jsonl`` as a frame (empty when absent); torn lines are skipped."""
    p = run_dir / "sink.jsonl" if run_dir else None
    if p is None or not p.exists():
        return pd.DataFrame()
    rows = []
    for line in p.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return pd.DataFrame.from_records(rows)


def _read_parquet(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.exists() else None


def run_checks(hist: pd.DataFrame, inp: pd.DataFrame, out: pd.DataFrame, rec: Recovery, *,
               sink_log: pd.DataFrame | None = None, uncommitted: pd.DataFrame | None = None,
               live: pd.DataFrame | None = None, lso: dict | None = None, hw: dict | None = None,
               nemesis: pd.DataFrame | None = None) -> dict:
    """Every checker on already-read frames; the one place the composition is decided."""
    base = check(hist, inp, out, rec)
    result = compose.combine(base, output=out, sink_log=sink_log, uncommitted=uncommitted, live=live, lso=lso, hw=hw)
    return nearby.attach(result, out, inp, nemesis)


def check_live(bootstrap: str, input_topic: str, output_topic: str, run_dir: Path | None,
               st: RecoveryStatus, live: pd.DataFrame | None = None) -> dict:
    """Read, save (when ``run_dir`` is given) and check. Returns the combined result plus ``recovery``."""
    inp, out, unc, reasons = read_pair(bootstrap, input_topic, output_topic)
    hist = history.read(run_dir / "history.jsonl") if run_dir else pd.DataFrame()
    rec = Recovery(finished=st.finished and not reasons, reasons=st.reasons + reasons)
    lso = st.output_lso or topics.end_offsets(bootstrap, output_topic, committed=True)
    hw = st.output_hw or topics.end_offsets(bootstrap, output_topic, committed=False)
    if run_dir:
        _save(inp, run_dir / "input.parquet")
        _save(out, run_dir / "output.parquet")
        _save(unc, run_dir / "output_uncommitted.parquet")
        if live is not None:
            _save(live, run_dir / "live.parquet")
        (run_dir / "recovery.json").write_text(json.dumps(
            {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds,
             "input_end": st.input_end, "consumed": st.consumed, "output_lso": lso, "output_hw": hw}, indent=2))
    nem = history.read(run_dir / "nemesis.jsonl") if run_dir else None
    result = run_checks(hist, inp, out, rec, sink_log=read_sink_log(run_dir), uncommitted=unc, live=live,
                        lso=lso, hw=hw, nemesis=nem)
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds}
    return result


def check_saved(run_dir: Path) -> dict:
    """Re-check a stored run from its parquet snapshots, ``history.jsonl``, ``sink.jsonl`` and
    ``recovery.json``.

    Raises: ``CheckError`` naming the missing file (a run that crashed before its check has no topic
    snapshots: re-run it, or check its live topics with ``onceproof check --bootstrap``).
    """
    need = ["input.parquet", "output.parquet"]
    missing = [n for n in need if not (run_dir / n).exists()]
    if missing:
        raise CheckError(f"{run_dir} has no {', '.join(missing)}: the run ended before its check; "
                         "check a live cluster with `onceproof check --bootstrap HOST:PORT` instead")
    inp = pd.read_parquet(run_dir / "input.parquet")
    out = pd.read_parquet(run_dir / "output.parquet")
    rec, lso, hw = Recovery(), None, None
    if (run_dir / "recovery.json").exists():
        r = json.loads((run_dir / "recovery.json").read_text())
        rec = Recovery(r["finished"], r["reasons"])
        lso = {int(k): v for k, v in (r.get("output_lso") or {}).items()}
        hw = {int(k): v for k, v in (r.get("output_hw") or {}).items()}
    result = run_checks(history.read(run_dir / "history.jsonl"), inp, out, rec, sink_log=read_sink_log(run_dir),
                        uncommitted=_read_parquet(run_dir / "output_uncommitted.parquet"),
                        live=_read_parquet(run_dir / "live.parquet"), lso=lso, hw=hw,
                        nemesis=history.read(run_dir / "nemesis.jsonl"))
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons}
    return result
