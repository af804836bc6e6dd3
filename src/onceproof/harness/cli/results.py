"""The commands on stored results: ``report`` (rebuild one run's report), ``index`` (the results root's
``index.html``), ``prune`` (delete old runs) and ``serve`` (browse them on 127.0.0.1)."""

from __future__ import annotations

import functools
import http.server
from pathlib import Path

import typer

from onceproof.harness.cli.app import console, on_crash, require_run_dir, usage
from onceproof.report.html import build_report
from onceproof.report.index import build_index
from onceproof.report.junit import write_junit
from onceproof.store import retention
from onceproof.store.runfiles import RunFiles
from onceproof.store.runs import DEFAULT_ROOT, runs_of, tests_in


def report(run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="a run directory, e.g. results/latest"),
           standalone: bool = typer.Option(False, "--standalone", help="inline plotly's JavaScript (~4.8 MB) so "
                                           "report.html works copied on its own; by default a report inside a "
                                           "results directory loads the one copy in <results>/assets/")) -> None:
    """Rebuild a run's report.html and junit.xml from its files.

    Exit code: 0 written, 254 not a run directory, 255 crashed.
    """
    on_crash("report", None)
    rd = require_run_dir(run_dir)
    on_crash("report", RunFiles(rd).error_log("report"))
    write_junit(rd)
    console.print(f"report: {build_report(rd, standalone=standalone)}", soft_wrap=True)


def index(results: Path = typer.Argument(DEFAULT_ROOT, metavar="RESULTS", help="results root")) -> None:
    """Write results/index.html: every run with its verdict and a link to its report."""
    on_crash("index", None)
    if results.exists() and not results.is_dir():
        raise usage(f"{results} is not a directory", "RESULTS")
    console.print(f"index: {build_index(results, build_missing=True)}", soft_wrap=True)


def prune(
    results: Path = typer.Argument(DEFAULT_ROOT, metavar="RESULTS", help="results root"),
    keep_last: int = typer.Option(..., "--keep-last", help="runs to keep per test, newest first (≥ 1)"),
    test: str = typer.Option("", help="prune only this test (a directory under RESULTS)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="only list what would be deleted"),
) -> None:
    """Delete old runs: keep the newest N of each test, repoint the `latest` links.

    A run without results.json that changed in the last hour may still be running and is kept.
    index.html is not rebuilt (`onceproof index` does that).
    """
    on_crash("prune", None)
    if keep_last < 1:
        raise usage(f"must be ≥ 1, got {keep_last} (0 would keep everything: nothing to do)", "--keep-last")
    if not results.is_dir():
        raise usage(f"{results} is not a directory", "RESULTS")
    if test and not runs_of(results, test):
        raise usage(f"no runs of {test!r} under {results}; tests there: "
                    f"{', '.join(tests_in(results)) or 'none'}", "--test")
    gone = ({test: retention.prune(results, test, keep_last, dry_run=dry_run)} if test
            else retention.prune_all(results, keep_last, dry_run=dry_run))
    n = 0
    for runs in gone.values():
        for r in runs:
            n += 1
            console.print(f"{'would delete' if dry_run else 'deleted'} {r}", soft_wrap=True)
    console.print(f"{n} run(s) {'would be ' if dry_run else ''}deleted; kept the newest {keep_last} per test"
                  + ("" if dry_run or not n else "; `onceproof index` refreshes index.html"), soft_wrap=True)


def serve(results: Path = typer.Argument(DEFAULT_ROOT, metavar="RESULTS", help="results root"),
          port: int = typer.Option(8000, help="TCP port on 127.0.0.1")) -> None:
    """Browse the runs: builds results/index.html and serves the results directory on 127.0.0.1."""
    on_crash("serve", None)
    if not 0 < port < 65536:
        raise usage(f"must be a TCP port 1..65535, got {port}", "--port")
    build_index(results, build_missing=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(results))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        console.print(f"serving {results} at http://127.0.0.1:{port}/index.html (Ctrl-C to stop)")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
