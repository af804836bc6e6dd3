"""The false-alarm rate over several soaks: one table from the ``soak-<time>.json`` files of ``soak.py``.

A soak of 50 seeds under ``--nemesis all`` is about 6 h on 2 cores (each eos run 6.7–7.2 min: its 19 faults
need about 354 s for one turn each), longer than one sitting. Soaks of a few seeds each, run at different
times, add up here to the rate issue 42 asks for (0 false alarms, UNKNOWN ≤ 2 %).

Each (sink, seed) counts once: a seed soaked again keeps its newest row (files are read in the order
given), and the table says how many were replaced. A *false alarm* is a run whose expected verdict is
``valid`` (the eos sink) that came out ``invalid``; a *miss* is a run expected ``invalid`` (a weak sink)
that came out ``valid``. ``unknown`` and ``crashed`` runs are neither, and are counted and named apart.

Usage: ``python soak/summary.py results/soak-*.json [--out FILE.md]``. Exit 0 when there is no false
alarm, no miss and UNKNOWN (with crashed) is ≤ 2 % of each sink's runs; 1 otherwise; 254 when a file
cannot be read (the message names it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from onceproof.spans import spans

UNKNOWN_GOAL = 0.02
"""Issue 42, item 6: UNKNOWN ≤ 2 % of the runs."""

CONFIDENCE = 0.95


def zero_events_upper_bound(n: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided upper confidence bound of a rate of which ``n`` trials showed no event:
    ``1 − (1 − confidence) ** (1 / n)`` (the exact Clopper–Pearson bound when the count is 0; about 3/n at
    95 %, the "rule of three", Hanley & Lippman-Hand, JAMA 1983). A closed formula, so no statistics
    library is pulled in for it. ``n`` ≥ 1; raises ``ValueError`` otherwise."""
    if n < 1:
        raise ValueError(f"no trials: n={n}")
    return 1.0 - (1.0 - confidence) ** (1.0 / n)


class SoakFileError(Exception):
    """A soak JSON file that cannot be read or is not a list of soak rows; the message names the file."""


def load(paths: list[Path]) -> tuple[pd.DataFrame, int]:
    """The rows of ``paths`` (each ``soak.py``'s JSON: a list of row objects with at least ``sink``,
    ``seed``, ``verdict`` and ``expected``), one per (sink, seed), the newest kept; and how many rows a
    later file replaced. Raises :class:`SoakFileError`."""
    rows: list[dict] = []
    for p in paths:
        try:
            got = json.loads(Path(p).read_text())
        except (OSError, ValueError) as e:
            raise SoakFileError(f"{p}: {e}; pass the soak-<time>.json files soak.py wrote") from e
        if not isinstance(got, list) or not all(isinstance(r, dict) and {"sink", "seed", "verdict",
                                                                         "expected"} <= r.keys() for r in got):
            raise SoakFileError(f"{p}: not a soak.py table (a list of rows with sink, seed, verdict, expected)")
        rows.extend(dict(r, source=str(p)) for r in got)
    df = pd.DataFrame(rows, columns=sorted({k for r in rows for k in r} | {"sink", "seed", "verdict"}))
    kept = df.drop_duplicates(["sink", "seed"], keep="last")
    return kept.sort_values(["sink", "seed"]).reset_index(drop=True), len(df) - len(kept)


def summarize(df: pd.DataFrame) -> list[dict]:
    """One dict per sink of ``df`` (:func:`load`'s rows): ``runs``, ``seeds`` (their range as text),
    ``as_expected``, ``false_alarms`` and ``misses`` (the seeds), ``unknown`` (seed → its reasons),
    ``crashed`` (the seeds), ``unknown_rate`` (unknown and crashed over runs), ``false_alarm_bound`` (the
    95 % upper bound of the false-alarm rate when there were none, else ``None``), ``minutes``
    (median, min, max of the rows that have it), ``platform`` (finding → count, summed) and ``versions``
    (the Kafka and PySpark releases and commits the rows name, as text; rows of older soaks name none)."""
    out = []
    for sink, g in df.groupby("sink", sort=True):
        n = len(g)
        alarms = g[(g.expected == "valid") & (g.verdict == "invalid")]
        misses = g[(g.expected == "invalid") & (g.verdict == "valid")]
        unknown = g[g.verdict == "unknown"]
        crashed = g[~g.verdict.isin(["valid", "invalid", "unknown"])]
        platform: dict[str, int] = {}
        for p in g.get("platform", pd.Series(dtype=object)).dropna():
            for k, v in (p or {}).items():
                platform[k] = platform.get(k, 0) + int(v or 0)
        mins = pd.to_numeric(g.get("minutes", pd.Series(dtype=float)), errors="coerce").dropna()
        out.append({
            "sink": sink, "runs": n, "seeds": spans(int(s) for s in g.seed),
            "as_expected": int((g.verdict == g.expected).sum()),
            "false_alarms": [int(s) for s in alarms.seed], "misses": [int(s) for s in misses.seed],
            "unknown": {int(r.seed): list(r.why) if isinstance(r.get("why"), list) else [] for _, r in
                        unknown.iterrows()},
            "crashed": [int(s) for s in crashed.seed],
            "unknown_rate": (len(unknown) + len(crashed)) / n,
            "false_alarm_bound": zero_events_upper_bound(n) if alarms.empty and (g.expected == "valid").all()
            else None,
            "minutes": (float(mins.median()), float(mins.min()), float(mins.max())) if len(mins) else None,
            "platform": {k: v for k, v in platform.items() if v},
            "versions": _distinct(g, "kafka", "Kafka") + _distinct(g, "pyspark", "PySpark")
            + _distinct(g, "commit", "at"),
        })
    return out


def passed(summary: list[dict]) -> bool:
    """No false alarm, no miss, and UNKNOWN (with crashed) ≤ :data:`UNKNOWN_GOAL` for every sink."""
    return all(not s["false_alarms"] and not s["misses"] and s["unknown_rate"] <= UNKNOWN_GOAL for s in summary)


def markdown(summary: list[dict], replaced: int, files: int) -> str:
    """The table of :func:`summarize`, with a line per UNKNOWN run naming its reasons."""
    lines = [f"# soak summary: {files} file(s), {sum(s['runs'] for s in summary)} runs"
             + (f", {replaced} re-run seed(s) counted once (the newest)" if replaced else ""), "",
             "| sink | runs | seeds | as expected | false alarms | misses | unknown | crashed | unknown rate "
             "| false-alarm rate (95 % upper bound) | platform findings | min per run (median, range) | versions |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        bound = f"0 of {s['runs']} (≤ {s['false_alarm_bound']:.1%})" if s["false_alarm_bound"] is not None \
            else (f"{len(s['false_alarms'])} of {s['runs']}" if s["false_alarms"] else "–")
        pf = ", ".join(f"{k}={v}" for k, v in sorted(s["platform"].items()))
        m = s["minutes"]
        lines.append(f"| {s['sink']} | {s['runs']} | {s['seeds']} | {s['as_expected']} | "
                     f"{_seeds_or_none(s['false_alarms'])} | {_seeds_or_none(s['misses'])} | "
                     f"{_seeds_or_none(sorted(s['unknown']))} | {_seeds_or_none(s['crashed'])} | "
                     f"{s['unknown_rate']:.1%} | {bound} | {pf or 'none'} | "
                     f"{f'{m[0]:.1f} ({m[1]:.1f}–{m[2]:.1f})' if m else '–'} | {'; '.join(s['versions']) or '–'} |")
    for s in summary:
        for seed, why in sorted(s["unknown"].items()):
            lines.append(f"\n- {s['sink']} seed {seed} unknown: {'; '.join(str(w) for w in why if w) or '?'}")
    return "\n".join(lines) + "\n"


def _distinct(g: pd.DataFrame, col: str, label: str) -> list[str]:
    """``["Kafka 4.1.1, 4.4.0"]``: the distinct values of ``col`` in ``g``, or ``[]`` when none."""
    vals = sorted({str(v) for v in g.get(col, pd.Series(dtype=object)).dropna()})
    return [f"{label} {', '.join(vals)}"] if vals else []


def _seeds_or_none(seeds: list[int]) -> str:
    """``[34, 42]`` → ``"2 (seeds 34, 42)"``; ``"0"`` when none."""
    if not seeds:
        return "0"
    return f"{len(seeds)} (seed{'s' if len(seeds) > 1 else ''} {spans(seeds)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="soak-<time>.json files written by soak/soak.py")
    ap.add_argument("--out", type=Path, help="also write the table here (markdown)")
    a = ap.parse_args(argv)
    try:
        df, replaced = load(a.files)
    except SoakFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 254
    if df.empty:
        print("error: the files hold no runs; pass the soak-<time>.json of a soak that ran", file=sys.stderr)
        return 254
    s = summarize(df)
    text = markdown(s, replaced, len(a.files))
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0 if passed(s) else 1


if __name__ == "__main__":
    sys.exit(main())
