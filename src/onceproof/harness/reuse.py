"""``test-all --reuse SUITE_DIR``: a cell an earlier suite already ran and passed is not run again.

``make certify`` runs two suites, the detection table and the eos certificate. Six of the certificate's
cells (eos under ``process``, ``upgrade`` and ``disk``, seeds 1–2) are the very runs the detection table
ran as its controls: the same sink, workload, faults, seed, time limit and further options. Running them
twice costs about 25 minutes and proves nothing new. A suite given ``--reuse`` takes such a cell's record
from the earlier suite instead: its verdict, faults exercised, anomalies and report link, marked
``reused_from``. The same option resumes an interrupted or failed suite: pass its directory and only the
cells that did not pass run again.

A cell is the same when its :func:`run_key` is: the ``onceproof run`` options that decide what the run
does, without where its results go (``--results``, ``--test-name``) or which warm cluster it leases
(``--warm-cluster``). Only a cell that passed (its verdict the one expected) is reused: a failed cell
runs again, and its new run is the evidence.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from onceproof.report import certificate

SUITE_JSON = "suite.json"
_PLACE_ONLY = {"--results": 1, "--test-name": 1, "--warm-cluster": 1}
"""Options of a cell's run that say where it writes or which warm cluster it leases (and how many values
follow each), not what it does: left out of :func:`run_key`."""


def run_key(run_args: list[str], expect: str) -> str:
    """The identity of a cell: ``run_args`` (the arguments after ``onceproof run``) without
    :data:`_PLACE_ONLY` options, and the verdict the cell expects, as one JSON string. Pure."""
    kept, skip = [], 0
    for a in run_args:
        if skip:
            skip -= 1
            continue
        flag = a.split("=", 1)[0]
        if flag in _PLACE_ONLY:
            skip = 0 if "=" in a else _PLACE_ONLY[flag]
            continue
        kept.append(a)
    return json.dumps({"run": kept, "expect": expect})


@dataclass(frozen=True)
class Done:
    """A passed cell of an earlier suite: its suite directory and its ``suite.json`` record."""

    suite_dir: Path
    record: dict


def passed_cells(suite_dirs: list[Path]) -> dict[str, Done]:
    """The passed cells of ``suite_dirs`` by :func:`run_key` (the record's ``run_key``; records written before
    it existed are not matched); for a key passed in several, the last directory given wins.

    Raises: ``ValueError`` naming the directory when one has no readable ``suite.json``."""
    found: dict[str, Done] = {}
    for d in suite_dirs:
        d = Path(d).resolve()
        try:
            doc = json.loads((d / SUITE_JSON).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"--reuse {d}: no readable {SUITE_JSON} there ({e}); give a suite's directory, "
                             "for example results/mutants/latest") from None
        for rec in doc.get("cells") or []:
            if rec.get("passed") and rec.get("run_key") and rec.get("run_dir"):
                found[rec["run_key"]] = Done(d, rec)
    return found


def reused_record(done: Done, suite_dir: Path) -> dict:
    """``done``'s cell as a record of the suite in ``suite_dir``: read again from its run directory
    (``certificate.cell_from_run``, so its paths are relative to ``suite_dir``), with its original exit code
    and elapsed time, and ``reused_from``: the earlier suite's directory, relative to ``suite_dir``."""
    rec = done.record
    run_dir = (done.suite_dir / rec["run_dir"]).resolve()
    new = certificate.cell_from_run(run_dir, sink=rec["sink"], workload=rec["workload"], package=rec["package"],
                                    seed=rec["seed"], expect=rec["expect"], exit_code=rec["exit_code"],
                                    elapsed_s=rec["elapsed_s"], suite_dir=suite_dir)
    for k in ("log", "kafka", "pyspark", "run_key"):
        if rec.get(k) and not new.get(k):
            new[k] = rec[k]
    if new.get("log"):
        new["log"] = os.path.relpath(done.suite_dir / rec["log"], suite_dir)
    new["reused_from"] = os.path.relpath(done.suite_dir, suite_dir)
    return new
