"""The commands that run many tests: ``test-all`` (a matrix of runs and its certificate,
``harness/suite.py``) and ``shrink`` (a failing run's schedule cut to a 1-minimal one, ``harness/shrink.py``).
Each of their runs is a whole ``onceproof run`` in a subprocess."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import typer

from onceproof.backends import registry
from onceproof.backends.common import jars, spark_release
from onceproof.harness import reuse, suite
from onceproof.harness import shrink as shrinker
from onceproof.harness.cli.app import console, finite, on_crash, require_run_dir, usage
from onceproof.harness.config import kafka_release_refusal, read_schedule, runtime_refusal
from onceproof.nemesis import packages
from onceproof.store.runs import DEFAULT_ROOT, runs_of

# test-all passes the options after its own to every run
TEST_ALL_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
_SET_PER_CELL = ("--sink", "--workload", "--nemesis", "--seed", "--test-name", "--results", "--schedule",
                 "--pipeline-cmd")


def test_all(
    ctx: typer.Context,
    sink: str = typer.Option("eos", help="comma-separated sinks (sinks/registry.py); ignored with --mutants"),
    workload: str = typer.Option("keyed", help="comma-separated workloads (workloads/registry.py)"),
    nemesis_package: str = typer.Option("", help="comma-separated fault packages: process, pause, network, lossy, "
                                                 "clock, commit, operator, upgrade, all (nemesis/packages.py); "
                                                 "default: process,commit, or "
                                                 "with --mutants each mutant's own"),
    test_count: int = typer.Option(1, help="seeds per cell (seed-base, seed-base+1, ...)"),
    seed_base: int = typer.Option(1, help="the first seed"),
    mutants: bool = typer.Option(False, "--mutants", help="the detection table: every mutant and at-least-once "
                                                          "against the package aimed at it, eos as the control"),
    weak_configs: bool = typer.Option(False, "--weak-configs", help="with --mutants: also the eos sink on each weak "
                                      "cluster config (--cluster-config single-replica) against the package that "
                                      "loses its data (disk), expecting the loss caught"),
    time_limit: float = typer.Option(30.0, help="each run's --time-limit, s (raised to what a package needs)"),
    suite_name: str = typer.Option("", help="results/<suite-name>/<timestamp>/; default test-all or mutants"),
    results: Path = typer.Option(DEFAULT_ROOT, help="results root directory"),
    backend: str = typer.Option(registry.DEFAULT, help="the backend of every run: " + ", ".join(registry.names())),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the cells and stop"),
    stop_when_caught: bool = typer.Option(False, "--stop-when-caught",
                                          help="once a seed catches a mutant (or weak sink) under a package, skip "
                                               "its further seeds there: 'caught within --test-count seeds' is "
                                               "settled; the certificate lists the seeds not run"),
    fresh_cluster: bool = typer.Option(False, "--fresh-cluster",
                                       help="start a cluster per cell; by default the cells share a warm cluster "
                                            "the suite starts (proved healthy before each cell, a dead or lagging "
                                            "broker restarted; cells whose faults need brokers of another shape "
                                            "start their own) and the certificate says which ran where"),
    kafka_versions: str = typer.Option("", help="the version axis: comma-separated Kafka releases (X.Y.Z, "
                                                + jars.SUPPORTED_KAFKA + "); every cell runs once on each, and "
                                                "the certificate gives the matrix per release (docs/versions.md)"),
    spark_versions: str = typer.Option("", help="the Spark axis: comma-separated PySpark lines or releases "
                                                "(3.5, 4.1, 4.3.0; " + spark_release.SUPPORTED_SPARK + ") the "
                                                "bundled pipeline runs on; every cell runs once on each (with "
                                                "--kafka-versions: on each pair), and the certificate gives the "
                                                "matrix per version pair (docs/versions.md)"),
    reuse_: list[Path] = typer.Option([], "--reuse", help="an earlier suite's directory (repeatable; e.g. "
                                      "results/mutants/latest): a cell it ran and passed with the same run "
                                      "options is taken from it, not run again; resumes an interrupted suite"),
    pipeline_cmd: str = typer.Option("", help="certify your own PySpark job instead of a bundled sink (as `run "
                                              "--pipeline-cmd`): cells are labelled user:<script>, each package is "
                                              "narrowed to the faults your job can take (the certificate lists "
                                              "the rest)"),
) -> None:
    """Run a matrix of tests (sink × workload × fault package × seed [× Kafka × PySpark release]); certify it.

    Every cell is one `onceproof run` (its own cluster, teardown and report, under <suite>/runs/).
    Further `run` options after the known ones (e.g. --rate 500 --partitions 4) go to every run.
    Writes suite.json, certificate.md, certificate.html and junit.xml. PASS requires every
    exactly-once cell to be valid and every mutant cell to be caught.

    Exit code: the worst cell's (a caught mutant counts as passed); 255 when interrupted.
    """
    on_crash("test-all", None)
    finite(time_limit, "--time-limit")
    if pipeline_cmd and sink != "eos":
        raise usage("--sink chooses a bundled sink; with --pipeline-cmd your job brings its own: drop --sink",
                    "--sink")
    try:
        pkgs = packages.parse(nemesis_package) if nemesis_package else ([] if mutants else ["process", "commit"])
        cells = suite.plan_cells(sinks_=[x.strip() for x in sink.split(",") if x.strip()],
                                 workloads=[x.strip() for x in workload.split(",") if x.strip()],
                                 package_names=pkgs, test_count=test_count, time_limit=time_limit,
                                 mutants=mutants, seed_base=seed_base, pipeline_cmd=pipeline_cmd,
                                 weak_configs=weak_configs, performs=_performs(backend))
    except ValueError as e:
        raise usage(str(e)) from None
    extra = list(ctx.args)
    for bad in _SET_PER_CELL:
        if any(a == bad or a.startswith(bad + "=") for a in extra):
            raise usage(f"{bad} is set by test-all for each cell; use test-all's own options", bad)
    kafka = suite.option_value(extra, "--kafka-version")  # every cell's brokers: refused once, here
    if kafka and (why := jars.kafka_version_problem(kafka)):
        raise usage(why, "--kafka-version")
    axis = list(dict.fromkeys(v.strip() for v in kafka_versions.split(",") if v.strip()))
    if axis and kafka:
        raise usage("--kafka-versions runs every cell on each release it names: drop --kafka-version",
                    "--kafka-versions")
    if axis and backend in registry.names() and \
            (why := kafka_release_refusal(registry.backend_class(backend), "--kafka-versions")):
        raise usage(why, "--kafka-versions")
    for v in axis:
        if why := jars.kafka_version_problem(v):
            raise usage(why, "--kafka-versions")
    sparks = _spark_axis(spark_versions, extra, backend, [x.strip() for x in sink.split(",") if x.strip()],
                         pipeline_cmd)
    cells = suite.across_versions(cells, axis, sparks)
    if backend != registry.DEFAULT:
        extra += ["--backend", backend]
    try:
        reused = reuse.passed_cells(reuse_)
    except ValueError as e:
        raise usage(str(e), "--reuse") from None
    dropped = suite.left_out(cells)
    if dry_run:
        for d in dropped:
            console.print(f"left out of {d['package']} for {d['sut']}: {d['spec']} ({d['why']})", soft_wrap=True,
                          markup=False, emoji=False)
        for c in cells:
            args = suite.run_command(c, results / "<suite>" / "runs", extra)[3:]
            done = reused.get(reuse.run_key(args, c.expect))
            console.print(f"{c.name} seed {c.seed} expect {c.expect} time-limit {c.time_limit:g}s: "
                          + (f"reused from {done.suite_dir}" if done else " ".join(args)), soft_wrap=True,
                          markup=False, emoji=False)
        raise typer.Exit(0)
    name = suite_name or ("mutants" if mutants else "test-all")
    command = (shlex.join(["onceproof", "test-all", *sys.argv[2:]]) if sys.argv[1:2] == ["test-all"]
               else "onceproof test-all")
    code = suite.Suite(name, cells, results, command, backend, extra, console, left_out=dropped,
                       stop_when_caught=stop_when_caught, fresh_cluster=fresh_cluster, reused=reused).run()
    raise typer.Exit(code)


def _spark_axis(spark_versions: str, extra: list[str], backend: str, sink_names: list[str],
                pipeline_cmd: str) -> list[str]:
    """``--spark-versions`` as a list (first-seen order), refused up front (254, naming the fix) when a name is
    not a supported line or release, ``--spark-version`` is also among the further options, the backend
    runs one PySpark, the cells run a user's job, or a sink's writer needs its own PySpark (Delta's). Whether
    PyPI and Maven serve each is learned by its first run (``run --spark-version``)."""
    from onceproof.sinks import registry as sinks

    sparks = list(dict.fromkeys(v.strip() for v in spark_versions.split(",") if v.strip()))
    if not sparks:
        return []
    if suite.option_value(extra, "--spark-version"):
        raise usage("--spark-versions runs every cell on each release it names: drop --spark-version",
                    "--spark-versions")
    if pipeline_cmd:
        raise usage("--spark-versions is for the bundled pipeline; your job runs on its own PySpark "
                    "(--pipeline-python): drop --spark-versions", "--spark-versions")
    if backend in registry.names() and \
            (why := runtime_refusal(registry.backend_class(backend), "--spark-versions")):
        raise usage(why, "--spark-versions")
    for v in sparks:
        if why := spark_release.problem(v):
            raise usage(why, "--spark-versions")
    own = [f"{s} (PySpark {sinks.get(s).spark_runtime})" for s in sink_names
           if s in sinks.SINKS and sinks.get(s).spark_runtime]
    if own:
        raise usage(f"{', '.join(own)} runs on its writer's own PySpark: leave it out of a --spark-versions "
                    "suite", "--spark-versions")
    return sparks


def _performs(backend: str) -> frozenset[str] | None:
    """What ``backend`` can perform at most (``capabilities.of_class``), ``None`` for the default backend
    (every fault of the packages); an unknown name is left to the runs to refuse."""
    from onceproof.backends import capabilities

    if backend == registry.DEFAULT or backend not in registry.names():
        return None
    return capabilities.of_class(registry.backend_class(backend))


def shrink(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="a failing (invalid) run directory"),
    max_runs: int = typer.Option(12, help="at most this many candidate runs"),
) -> None:
    """Shrink a failing run's fault schedule to a 1-minimal one that still fails with the same anomaly
    class (delta debugging, ddmin): each candidate is replayed with the same workload seed.

    Writes RUN_DIR/shrink/shrink.json (every candidate and its verdict) and prints the replay command of
    the minimal schedule (`onceproof run ... --schedule FILE`).
    """
    on_crash("shrink", None)
    run_dir = require_run_dir(run_dir)
    if max_runs < 1:
        raise usage(f"must be ≥ 1, got {max_runs}", "--max-runs")
    out = run_dir / "shrink"
    try:
        res = shrinker.shrink(run_dir, max_runs=max_runs, out_dir=out, run=_run_candidate,
                              echo=lambda line: console.print(line, markup=False, highlight=False),
                              test_name=f"{run_dir.parent.name}-shrink")
    except ValueError as e:
        raise usage(str(e)) from None
    console.print(f"minimal schedule: {[f['f'] for f in res['minimal']]} "
                  f"({'1-minimal' if res.get('one_minimal') else 'not proven 1-minimal: --max-runs reached'}) "
                  f"after {res['runs']} run(s); {out / 'shrink.json'}")
    console.print(f"replay: [cyan]{res['replay']}[/]", soft_wrap=True)


def _run_candidate(command: str) -> Path | None:
    """Run one shrink candidate (``onceproof run ... --schedule FILE``) in a subprocess; its run directory,
    or ``None`` when it made none. Raises ``ValueError`` for a command that is not ``onceproof run``.

    A candidate's workload lasts only until its last fault (+ 10 s, at least 15 s), not the whole original
    ``--time-limit``: same seed, same schedule offsets, a shorter tail (the run still goes on until every
    fault of the schedule had its turn).
    """
    argv = shlex.split(command)
    if argv[:2] != ["onceproof", "run"]:
        raise ValueError(f"not a run command: {command}")
    args = argv[2:]
    last = max((f["at_s"] for f in read_schedule(args[args.index("--schedule") + 1])), default=0.0)
    if "--time-limit" in args:
        i = args.index("--time-limit")
        args[i + 1] = f"{min(float(args[i + 1]), max(15.0, last + 10)):g}"
    results = Path(args[args.index("--results") + 1]) if "--results" in args else DEFAULT_ROOT
    name = args[args.index("--test-name") + 1]
    before = runs_of(results, name)
    subprocess.run(suite.run_argv(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return suite.new_run(results, name, before)
