"""The soak: seeded chaos runs of every fault and target, for both sinks, as a table.

Issue 7's acceptance: ``--sink eos --nemesis all`` over seeds 1–10 must give 10 × ``valid`` (no false
alarm, every fault family and target exercised) and ``--sink at-least-once`` over the same seeds 10 ×
``invalid``. Each run is the real CLI, one after the other (2 cores: never two clusters at once), on one
warm cluster the soak starts behind toxiproxy with its brokers in cgroups of their own (``harness/warm.py``;
``--fresh-cluster``: a cluster per run); the table says which each ran on, and the platform findings.
Writes ``<results>/soak-<time>.md`` and ``.json`` and prints the table as it goes;
exit code 0 only when every eos run is valid and every at-least-once run invalid.

Usage: ``python soak/soak.py [--seeds 1-10] [--sinks eos,at-least-once] [--time-limit 120] [--fresh-cluster]``
(measured on 2 cores: eos 7.4–8.1 min a run, at-least-once 5.5 min; ``make soak`` is about 2 h 15 min).
Soaks of a few seeds each add up to one false-alarm rate with ``soak/summary.py`` (``make soak-summary``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from onceproof.backends import registry  # noqa: E402 - after the path: soak.py runs as a script
from onceproof.harness import warm  # noqa: E402
from onceproof.sinks import registry as sinks  # noqa: E402

EXPECT = {s.name: s.expect for s in sinks.entries()}


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-10", help="e.g. 1-10 or 1,4,7")
    ap.add_argument("--sinks", default="eos,at-least-once")
    ap.add_argument("--nemesis", default="all")
    ap.add_argument("--time-limit", default="120")
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--fresh-cluster", action="store_true", help="a cluster per run, not one warm cluster")
    a = ap.parse_args(argv)
    owned = None if a.fresh_cluster else warm.start(registry.get("local"), a.results.absolute() / "soak-warm-cluster",
                                                    proxied=True, own_groups=True)
    try:
        return _soak(a, ["--warm-cluster", str(owned.data_dir)] if owned else [])
    finally:
        if owned is not None:
            owned.stop()


def _soak(a, on: list[str]) -> int:
    """Every (sink, seed) run, the table rewritten after each; the exit code."""
    rows, t0 = [], time.time()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or None
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out_md, out_json = a.results / f"soak-{stamp}.md", a.results / f"soak-{stamp}.json"
    a.results.mkdir(parents=True, exist_ok=True)
    for sink in a.sinks.split(","):
        for seed in _seeds(a.seeds):
            t = time.time()
            p, run_dir, limit = _run(a, sink, seed, on)
            try:
                if run_dir is None:
                    raise OSError("no new run directory")
                r = json.loads((run_dir / "results.json").read_text())
            except (OSError, ValueError):
                r = {"verdict": "crashed", "error": p.stderr[-300:]}
            cov, versions = r.get("coverage") or [], r.get("versions") or {}
            row = {"sink": sink, "seed": seed, "verdict": r.get("verdict"), "exit": p.returncode, "time_limit": limit,
                   "expected": EXPECT.get(sink), "minutes": round((time.time() - t) / 60, 1),
                   "exercised": f"{sum(1 for c in cov if c['exercised'])}/{len(cov)}",
                   "anomalies": {k: v for k, v in (r.get("counts") or {}).items() if v},
                   "why": (r.get("unknown_reasons") or [r.get("error")] or [""])[:2], "run_dir": str(run_dir),
                   "cluster": "warm" if (r.get("cluster") or {}).get("warm") else "fresh",
                   "platform": (r.get("platform_findings") or {}).get("counts") or {},
                   "kafka": versions.get("kafka"), "pyspark": versions.get("pyspark"),
                   "commit": commit}
            rows.append(row)
            why = "" if row["verdict"] == row["expected"] else row["why"]
            print(f"{sink:14} seed {seed:2}: {row['verdict']:8} exercised {row['exercised']:6} "
                  f"{row['minutes']} min {row['anomalies'] or ''} {why}", flush=True)
            out_json.write_text(json.dumps(rows, indent=2))
            _write_md(out_md, rows, a, time.time() - t0)
    ok = all(r["verdict"] == r["expected"] for r in rows)
    print(f"{'PASS' if ok else 'FAIL'}: {out_md}")
    return 0 if ok else 1


def _run(a, sink: str, seed: int, on: list[str]) -> tuple[subprocess.CompletedProcess, Path | None, str]:
    """One ``onceproof run`` of ``sink`` and ``seed`` at ``--time-limit a.time_limit``, or, when the CLI
    refuses that limit as too short for this seed's faults (their targets and holds are drawn per seed), once
    more at the limit its error names. Returns the process, the run's own directory (``None`` when the run
    made none: a refused command; never an earlier run's ``latest``) and the time limit used."""
    latest = a.results / f"soak-{sink}" / "latest"
    before = latest.resolve() if latest.exists() else None
    limit = a.time_limit
    for _ in range(2):  # the limit asked, then at most the one the refusal names
        p = subprocess.run([sys.executable, "-m", "onceproof.harness.cli", "run", "--sink", sink,
                            "--nemesis", a.nemesis, "--time-limit", limit, "--seed", str(seed),
                            "--results", str(a.results), "--test-name", f"soak-{sink}", *on],
                           capture_output=True, text=True)
        hint = time_limit_hint(p.stderr + p.stdout) if p.returncode == 254 else None
        if hint is None or hint == limit:
            break
        limit = hint
    after = latest.resolve() if latest.exists() else None
    return p, (after if after is not None and after != before else None), limit


def time_limit_hint(output: str) -> str | None:
    """The time limit that ``onceproof run``'s refusal names (``use --time-limit 121 or more``,
    ``nemesis/schedule.py``), or ``None``."""
    m = re.search(r"use --time-limit (\d+(?:\.\d+)?) or more", " ".join(output.split()))
    return m.group(1) if m else None


def _write_md(path: Path, rows: list[dict], a, elapsed: float) -> None:
    lines = [f"# soak: --nemesis {a.nemesis} --time-limit {a.time_limit}, {elapsed / 60:.0f} min", "",
             "| sink | seed | verdict | expected | exercised | anomalies | platform findings | why not as expected "
             "| cluster | time limit | min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        an = ", ".join(f"{k}={v}" for k, v in r["anomalies"].items())
        pf = ", ".join(f"{k}={v}" for k, v in r["platform"].items() if v)
        why = "" if r["verdict"] == r["expected"] else "; ".join(str(w) for w in r["why"] if w)
        lines.append(f"| {r['sink']} | {r['seed']} | {r['verdict']} | {r['expected']} | {r['exercised']} | {an} | "
                     f"{pf} | {why} | {r['cluster']} | {r['time_limit']} | {r['minutes']} |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
