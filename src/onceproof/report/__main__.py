"""``python -m report RUN_DIR... [--junit] [--index ROOT]``: write each run's ``report.html`` (and
``junit.xml``), and ``ROOT/index.html``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onceproof.report.html import build_report
from onceproof.report.index import build_index
from onceproof.report.junit import write_junit
from onceproof.store.runfiles import JUNIT, REPORT
from onceproof.store.runs import INDEX


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), write what it asks for, print each path written; 0."""
    ap = argparse.ArgumentParser(prog="python -m report", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="*", type=Path, help=f"run directories to write {REPORT} for")
    ap.add_argument("--junit", action="store_true", help=f"also write {JUNIT} for each run directory")
    ap.add_argument("--standalone", action="store_true", help="inline plotly's JS instead of <results>/assets/")
    ap.add_argument("--index", type=Path, metavar="ROOT", help=f"write ROOT/{INDEX} (building missing reports)")
    a = ap.parse_args(argv)
    for d in a.run_dirs:
        print(build_report(d, standalone=a.standalone))
        if a.junit:
            print(write_junit(d))
    if a.index:
        print(build_index(a.index, build_missing=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
