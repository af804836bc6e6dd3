"""Glue between the topics and the pure checker: read, save, check.

``check_live`` reads the input and output topics at read_committed (after recovery), saves them as
``input.parquet`` / ``output.parquet`` in the run directory, and runs ``checkers.exactly_once``.
``check_saved`` re-runs the checker offline on a stored run directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from checkers.exactly_once import Recovery, check
from harness import history, topics
from harness.recovery import RecoveryStatus


class CheckError(RuntimeError):
    """The data needed for a check is missing or unreadable."""


def read_pair(bootstrap: str, input_topic: str, output_topic: str, timeout_s: float = 300.0
              ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Read both topics at read_committed into checker frames; also returns incompleteness reasons."""
    reasons = []
    inp = topics.read_topic(bootstrap, input_topic, committed=True, timeout_s=timeout_s, with_headers=False)
    out = topics.read_topic(bootstrap, output_topic, committed=True, timeout_s=timeout_s, with_headers=True)
    for name, r in ((input_topic, inp), (output_topic, out)):
        if not r.complete:
            reasons.append(f"reading {name} did not reach its end offsets within {timeout_s:.0f}s")
    return topics.decode_values(inp.frame), topics.decode_values(out.frame), reasons


def _save(frame: pd.DataFrame, path: Path) -> None:
    frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object}).to_parquet(path, index=False)


def check_live(bootstrap: str, input_topic: str, output_topic: str, run_dir: Path | None,
               st: RecoveryStatus) -> dict:
    """Read, save (when ``run_dir`` is given) and check. Returns the checker's result plus ``recovery``."""
    inp, out, reasons = read_pair(bootstrap, input_topic, output_topic)
    hist = history.read(run_dir / "history.jsonl") if run_dir else pd.DataFrame()
    rec = Recovery(finished=st.finished and not reasons, reasons=st.reasons + reasons)
    if run_dir:
        _save(inp, run_dir / "input.parquet")
        _save(out, run_dir / "output.parquet")
        (run_dir / "recovery.json").write_text(json.dumps(
            {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds,
             "input_end": st.input_end, "consumed": st.consumed, "output_lso": st.output_lso,
             "output_hw": st.output_hw}, indent=2))
    result = check(hist, inp, out, rec)
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons, "seconds": st.seconds}
    return result


def check_saved(run_dir: Path) -> dict:
    """Re-check a stored run from ``input.parquet``, ``output.parquet``, ``history.jsonl`` and
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
    rec = Recovery()
    if (run_dir / "recovery.json").exists():
        r = json.loads((run_dir / "recovery.json").read_text())
        rec = Recovery(r["finished"], r["reasons"])
    result = check(history.read(run_dir / "history.jsonl"), inp, out, rec)
    result["recovery"] = {"finished": rec.finished, "reasons": rec.reasons}
    return result
