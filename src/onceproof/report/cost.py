"""What a suite's verdict cost, and where the time went (issue 42, "The cost of a verdict").

Each cell's wall time is split into the run's own phases, as its ``results.json`` ``timings`` measure them
(``harness/runner.py``), and the certificate sums them per fault package, so that a release manager sees
what a certification costs and what a cheaper one would have to cut:

* ``setup``: the brokers (none on a warm cluster), the fault network, the database and the Spark query up
  (``setup_s``);
* ``run``: the workload under its faults: the time limit, its extension until every planned fault has had
  its turn, the heal (``total_s`` less the other phases);
* ``recovery``: until the query has caught up with the input after the heal (``recovery_s``);
* ``check``: reading the topics at read_committed and checking (``check_s``);
* ``teardown``: stopping what the run started (``teardown_s``);
* ``launch``: the cell's wall time less the run's own ``total_s``: the run process's start (interpreter,
  imports), the warm cluster's lease and health gate, writing the report.

A cell taken from an earlier suite (``--reuse``) cost nothing in this one and is counted apart. A crashed
cell, or one from before ``timings`` were recorded, counts its wall time as ``launch``. Pure: cell
records in (``report/certificate.py``'s shape, with ``timings`` and ``time_limit_s``), dicts out.
"""

from __future__ import annotations

PHASES = ("setup", "run", "recovery", "check", "teardown", "launch")
"""The phases of a cell's wall time, in the order a run goes through them (module docstring)."""
_MEASURED = {"setup": "setup_s", "recovery": "recovery_s", "check": "check_s", "teardown": "teardown_s"}


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def cell_phases(timings: dict | None, elapsed_s: float) -> dict[str, float]:
    """``{phase: s}`` for one cell, over :data:`PHASES`, summing to ``elapsed_s`` (s, the cell's wall time).

    ``timings``: the run's ``results.json`` ``timings`` (``setup_s``, ``recovery_s``, ``check_s``,
    ``teardown_s``, ``total_s``; s), or ``None`` / ``{}`` for a crashed run (all of it ``launch``). A
    negative remainder (clock rounding) is clamped to 0."""
    t = timings or {}
    total = _num(t.get("total_s"))
    if not total:
        return {**dict.fromkeys(PHASES, 0.0), "launch": round(float(elapsed_s), 1)}
    out = {p: _num(t.get(k)) for p, k in _MEASURED.items()}
    out["run"] = max(0.0, total - sum(out.values()))
    out["launch"] = max(0.0, float(elapsed_s) - total)
    return {p: round(out[p], 1) for p in PHASES}


def suite_cost(cells: list[dict]) -> dict:
    """The suite's cost: ``{"cells": n run here, "elapsed_s": s, "phases": {phase: s}, "over_limit_s": s,
    "reused": n, "reused_elapsed_s": s (what they took in their own suite), "packages": [{"package", "cells",
    "elapsed_s", "phases", "over_limit_s"}, ...]}``, packages by elapsed time, longest first.

    ``over_limit_s``: the ``run`` phase beyond each cell's time limit (``time_limit_s``; cells without one
    add nothing): what the extension until every fault's turn, and the heal, cost."""
    def empty(package: str | None = None) -> dict:
        d = {"cells": 0, "elapsed_s": 0.0, "phases": dict.fromkeys(PHASES, 0.0), "over_limit_s": 0.0}
        return d if package is None else {"package": package, **d}

    total, by_pkg, reused, reused_s = empty(), {}, 0, 0.0
    for c in cells:
        if c.get("reused_from"):
            reused += 1
            reused_s += _num(c.get("elapsed_s"))
            continue
        ph = cell_phases(c.get("timings"), _num(c.get("elapsed_s")))
        over = max(0.0, ph["run"] - _num(c.get("time_limit_s"))) if c.get("time_limit_s") else 0.0
        for d in (total, by_pkg.setdefault(str(c.get("package")), empty(str(c.get("package"))))):
            d["cells"] += 1
            d["elapsed_s"] += _num(c.get("elapsed_s"))
            d["over_limit_s"] += over
            for p in PHASES:
                d["phases"][p] += ph[p]
    return {**total, "reused": reused, "reused_elapsed_s": reused_s,
            "packages": sorted(by_pkg.values(), key=lambda d: -d["elapsed_s"])}


def _min(s: float) -> str:
    return f"{s / 60:.1f} min"


def _share(part: float, whole: float) -> str:
    return f"{_min(part)} ({100 * part / whole:.0f} %)" if whole else _min(part)


def cost_table(cost: dict) -> tuple[list[str], list[list[str]]]:
    """The certificate's "Where the time went" table: a head and rows of strings, one row per package and
    a last row for the whole suite; each phase as minutes and its share of the row's wall time."""
    head = ["package", "cells", "wall time", *PHASES, "beyond the time limits"]

    def row(name: str, d: dict) -> list[str]:
        return [name, str(d["cells"]), _min(d["elapsed_s"]), *(_share(d["phases"][p], d["elapsed_s"]) for p in PHASES),
                _min(d["over_limit_s"])]

    return head, [row(d["package"], d) for d in cost["packages"]] + [row("all", cost)]


def cost_note(cost: dict) -> str:
    """One sentence under the table: the phases' meaning and what ``--reuse`` saved."""
    s = ("setup: brokers, fault network and Spark query up; run: the time limit, its extension until every fault "
         "had its turn, and the heal; launch: the run process's start, the warm cluster's health gate and the "
         "report")
    if cost["reused"]:
        s += (f"; {cost['reused']} cells were taken from an earlier suite (--reuse) and are not counted: they "
              f"took {_min(cost['reused_elapsed_s'])} there")
    return s


def cost_line(cost: dict) -> str:
    """The suite's cost in one console line: wall time and each phase's share."""
    return (f"{cost['cells']} cells ran in {_min(cost['elapsed_s'])}: "
            + ", ".join(f"{p} {_share(cost['phases'][p], cost['elapsed_s'])}" for p in PHASES)
            + (f"; {cost['reused']} reused" if cost["reused"] else ""))
