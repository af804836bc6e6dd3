"""The harness's overhead on the default run (issue 11, item 2): wall time − ``--time-limit``, and where it
goes, over ``--repeat`` runs (median).

Run from the repo root (``make bench-overhead``)::

    .venv/bin/python bench/overhead.py                 # the default `make run`, 3 times: ~7 min
    .venv/bin/python bench/overhead.py --repeat 1 --json /tmp/o.json

Each repeat is the README's default run (``make run``: ``--sink eos --nemesis
kill-executor,kill-driver-in-commit-window --time-limit 60 --seed 1``) as a child process, timed from
outside (wall s, process start to exit). The phases come from the run's ``results.json`` ``timings``
(the runner times them: ``setup_s`` Kafka and Spark both up, within it ``cluster_start_s`` Kafka up and
topics created and ``spark_start_s`` driver start to query ready, which overlap when the driver starts
with the brokers; ``recovery_s``, ``check_s``, ``teardown_s``); ``run_phase_s`` is what is left of
``total_s``, the workload and nemesis phase (the time limit, plus any extension until every planned fault
had its turn), and ``other_s`` = wall − ``total_s`` (interpreter and CLI start, report writing).

Targets (issue 42), each on the medians: overhead ≤ 20 s; the harness's own part, ``harness_s`` =
``setup_s`` + ``check_s`` + ``teardown_s``, ≤ 12 s; output visible again ≤ 20 s after the faults
(``visibility_max_s``, the longest send-to-visible time of the run's records, ``results.json``
``stats.visibility_latency_ms.max``). ``ONCEPROOF_CDS=0`` in the environment runs without class-data
sharing archives (``backends/common/cds.py``), for the A/B. Output: a table and, with ``--json``, every
repeat and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN = ["--sink", "eos", "--nemesis", "kill-executor,kill-driver-in-commit-window", "--time-limit", "60",
               "--seed", "1"]
PHASES = ("setup_s", "cluster_start_s", "spark_start_s", "run_phase_s", "recovery_s", "check_s", "teardown_s",
          "other_s", "harness_s", "visibility_max_s")
TARGETS = {"overhead_s": 20.0, "harness_s": 12.0, "visibility_max_s": 20.0}
"""Issue 42's targets, s (medians)."""


def one(results: Path, run_args: list[str], time_limit: float) -> dict:
    """One timed run → ``{"wall_s", "overhead_s", "verdict", <phase>: s}``.

    Raises: ``RuntimeError`` when the run stored no ``results.json``."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "onceproof.harness.cli", "run", *run_args, "--results", str(results)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    done = sorted(results.glob("*/*/results.json"), key=lambda f: f.stat().st_mtime)
    if not done:
        raise RuntimeError(f"the run stored no results.json (exit {p.returncode}): {p.stdout[-2000:]}")
    res = json.loads(done[-1].read_text())
    t = dict(res.get("timings", {}))
    # setup_s covers both starts (they overlap); a run from before it had them one after the other
    setup = t["setup_s"] if "setup_s" in t else t.get("cluster_start_s", 0.0) + t.get("spark_start_s", 0.0)
    fixed = setup + sum(t.get(k, 0.0) for k in ("recovery_s", "check_s", "teardown_s"))
    t["run_phase_s"] = round(t.get("total_s", wall) - fixed, 1)
    t["other_s"] = round(wall - t.get("total_s", wall), 1)
    t["harness_s"] = round(setup + t.get("check_s", 0.0) + t.get("teardown_s", 0.0), 1)
    vis = ((res.get("stats") or {}).get("visibility_latency_ms") or {}).get("max")
    t["visibility_max_s"] = round(vis / 1000, 1) if isinstance(vis, (int, float)) else None
    return {"wall_s": round(wall, 1), "overhead_s": round(wall - time_limit, 1), "verdict": res.get("verdict"),
            "exit": p.returncode, **{k: t.get(k) for k in PHASES}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, default=ROOT / "results" / "bench-overhead",
                    help="the runs go under KEEP/<timestamp>/r<N>/ (their logs show where recovery waited)")
    ap.add_argument("run_args", nargs="*", help="the run's options instead of the default run's (after --)")
    a = ap.parse_args(argv)
    run_args = a.run_args or DEFAULT_RUN
    time_limit = float(run_args[run_args.index("--time-limit") + 1]) if "--time-limit" in run_args else 30.0
    rows = []
    keep = a.keep / time.strftime("%Y%m%dT%H%M%S")
    print(f"runs kept under {keep}", flush=True)
    for i in range(a.repeat):
        rd = keep / f"r{i + 1}"
        rd.mkdir(parents=True)
        rows.append(one(rd, run_args, time_limit))
        print(f"repeat {i + 1}/{a.repeat}: {rows[-1]}", flush=True)
    med = {k: statistics.median(r[k] for r in rows if r.get(k) is not None)
           for k in ("wall_s", "overhead_s", *PHASES) if any(r.get(k) is not None for r in rows)}
    print("\n| | " + " | ".join(med) + " |")
    print("|---" * (len(med) + 1) + "|")
    for i, r in enumerate(rows):
        print(f"| run {i + 1} ({r['verdict']}) | " + " | ".join(str(r.get(k)) for k in med) + " |")
    print("| **median** | " + " | ".join(f"{v:.1f}" for v in med.values()) + " |")
    print(f"\nmedians of {len(rows)} (wall − time limit {time_limit:.0f} s is the overhead):")
    for k, bound in TARGETS.items():
        if k in med:
            print(f"  {k}: {med[k]:.1f} s (target ≤ {bound:.0f} s: {'met' if med[k] <= bound else 'NOT met'})")
    if a.json:
        a.json.write_text(json.dumps({"run": run_args, "repeats": rows, "median": med, "targets": TARGETS,
                                      "cds": os.environ.get("ONCEPROOF_CDS", "1") != "0",
                                      "load_avg_at_end": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
