"""``onceproof test-all``: a matrix of runs and its certificate (Jepsen's ``test-all``).

A suite is a list of **cells**, each one ``onceproof run`` of sink × workload × fault package × seed
(:func:`plan_cells`). Cells run one after another (two clusters on a small machine would slow each other
and blur every timing), each in its own ``onceproof run`` process, so each has the run's own
guarantees: its own teardown on every exit path, its own run directory under
``<suite dir>/runs/``, its own report. A live table shows every cell's verdict, elapsed time and the
suite's ETA. At the end (and after every cell, so an interrupted suite keeps what it learned) the
suite writes ``suite.json``, ``certificate.md``, ``certificate.html`` and ``junit.xml``
(``report/certificate.py``) into ``results/<suite name>/<timestamp>/``.

``--mutants`` turns the suite into the **detection table**: every mutant (``pipeline/mutants.py``)
and Spark's at-least-once sink run against the fault package that targets their flaw, and the real
``eos`` sink runs against the same packages as the control that must stay valid.

Exit code: the worst cell's, where a caught mutant counts as passed (``onceproof.report.certificate.suite_exit_code``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from onceproof.backends import registry
from onceproof.backends.base import can_perform
from onceproof.backends.user_pipeline import PipelineCommand
from onceproof.clients import durability
from onceproof.harness import reuse
from onceproof.nemesis import catalog, packages, schedule
from onceproof.pipeline import mutants
from onceproof.report import certificate, cost
from onceproof.sinks import registry as sinks
from onceproof.sinks.base import CAPABILITIES
from onceproof.store.runs import RunDir, runs_of
from onceproof.workloads import registry as workload_registry

CELL_STOP_GRACE_S = 150.0  # a Ctrl-C'd cell's own teardown is bounded (harness/teardown.py); then SIGKILL


USER = "user:"
"""Prefix of a cell's ``sink`` when the system under test is the user's ``--pipeline-cmd`` job."""


def user_label(pipeline_cmd: str) -> str:
    """How cells and the certificate name a ``--pipeline-cmd`` job: ``user:<script stem>``
    (``{python} jobs/orders.py ...`` → ``user:orders``), ``user:job`` when no ``.py`` word names it."""
    return USER + (PipelineCommand.parse(pipeline_cmd).script_name() or "job")


@dataclass(frozen=True)
class Cell:
    """One run of the suite. ``sink``: the bundled sink's name, or :func:`user_label` of the user's job
    (``pipeline_cmd``, run instead of the bundled pipeline). ``expect``: ``valid`` for an exactly-once sink
    or a user's job (which claims exactly-once), ``invalid`` for a mutant or a weak sink (the sink entry's
    ``expect``, ``sinks/base.py``); ``time_limit`` (s) is raised to what the package's faults need
    (:func:`fit_time_limit`)."""

    sink: str
    workload: str
    package: str
    seed: int
    expect: str
    time_limit: float
    pipeline_cmd: str = ""
    cluster_config: str = ""
    """A weak cluster config (``clients/durability.py``) the run's topics use instead of the default: the
    cell then expects the loss caught (``invalid``)."""
    performs: frozenset[str] | None = None
    """What the suite's backend can perform (``backends/capabilities.of_class``); ``None``: every fault."""
    kafka_version: str = ""
    """The Kafka release this cell's brokers start on (``test-all --kafka-versions``: the version axis);
    ``""``: the run's own default (``--kafka-version`` among the further options, else the pin)."""
    spark_version: str = ""
    """The PySpark release or line this cell's bundled pipeline runs on (``test-all --spark-versions``);
    ``""``: the run's own (``--spark-version`` among the further options, else onceproof's PySpark)."""

    @property
    def label(self) -> str:
        """How the certificate names the system under test: the sink, ``@<cluster config>`` when weak."""
        return f"{self.sink}@{self.cluster_config}" if self.cluster_config else self.sink

    @property
    def capabilities(self) -> frozenset[str]:
        """What the system under test lets faults use: the sink entry's; none for a user's job, whose
        sink onceproof cannot reach inside (``TestConfig.sink_capabilities``)."""
        return frozenset() if self.pipeline_cmd else sinks.get(self.sink).capabilities

    @property
    def name(self) -> str:
        w = "" if self.workload == "keyed" else f"{self.workload}-"
        k = f"-kafka{self.kafka_version}" if self.kafka_version else ""
        k += f"-spark{self.spark_version}" if self.spark_version else ""
        return f"{w}{self.label.replace(':', '-').replace('@', '-')}-{self.package}{k}"


def across_versions(cells: list[Cell], kafka_versions: list[str], spark_versions: list[str] = ()) -> list[Cell]:
    """The version axes: every cell once per pair of a Kafka release of ``kafka_versions`` and a PySpark
    release or line of ``spark_versions`` (either list may be empty: that axis is then the run's default),
    the pairs outermost (Kafka, then Spark, in the order given), so that the certificate reads as one matrix
    per version pair; ``cells`` unchanged when both lists are empty. Pure."""
    if not kafka_versions and not spark_versions:
        return list(cells)
    return [replace(c, kafka_version=k, spark_version=sv) for k in (kafka_versions or [""])
            for sv in (spark_versions or [""]) for c in cells]


def fit_time_limit(specs: list[str], time_limit: float, seed: int, interval_s: float = 10.0,
                   max_run_factor: float = 3.0) -> float:
    """``time_limit`` (s), raised to the least that fits one turn of every spec of the package
    (``onceproof.nemesis.schedule.PlanDoesNotFit.min_time_limit_s``)."""
    try:
        schedule.plan(specs, interval_s, time_limit, seed, targets=catalog.target_choices(),
                      durations=lambda s: catalog.expected_s(s), max_run_factor=max_run_factor)
        return time_limit
    except schedule.PlanDoesNotFit as e:
        return float(e.min_time_limit_s)


def plan_cells(*, sinks_: list[str], workloads: list[str], package_names: list[str], test_count: int,
               time_limit: float, mutants: bool = False, seed_base: int = 1, pipeline_cmd: str = "",
               weak_configs: bool = False, performs: frozenset[str] | None = None) -> list[Cell]:
    """The suite's cells, in run order: for each package, each sink, each workload, seeds
    ``seed_base`` .. ``seed_base + test_count - 1``.

    With ``mutants``: every mutant and ``at-least-once`` against the package that targets it
    (``Sink.targeted_by``; or against every package in ``package_names`` when given), and ``eos`` against
    every package used, as the control; without ``package_names``, also ``eos`` against each package of
    ``packages.EXPECT_INVALID`` (the traps), expecting ``invalid``. With ``pipeline_cmd``: the user's job
    instead of any sink, as the keyed workload (its contract), against each package narrowed to the faults
    it can take
    (:func:`left_out` lists the others); a package left with none is dropped. With ``mutants`` and
    ``weak_configs``: also the eos sink on each weak cluster config (``clients/durability.py``,
    ``targeted_by``) against the package that loses its data, expecting ``invalid`` (cell label
    ``eos@<config>``). With ``performs`` (the backend's capabilities): each package also narrowed to the
    faults the backend can perform (a fault given without a target to the targets it can), the others
    listed by :func:`left_out`.

    Raises: ``ValueError`` for an unknown sink, workload or package, ``test_count`` < 1, ``pipeline_cmd``
    with ``mutants`` or another workload, or no cell left.
    """
    if weak_configs and not mutants:
        raise ValueError("--weak-configs adds cells to the detection table: use it with --mutants")
    if pipeline_cmd:
        return _user_cells(pipeline_cmd, workloads, package_names, test_count, time_limit, mutants, seed_base,
                           performs)

    if test_count < 1:
        raise ValueError(f"--test-count must be ≥ 1, got {test_count}")
    for w in workloads:
        if w not in workload_registry.names():
            raise ValueError(f"unknown workload {w!r}; choose from {', '.join(workload_registry.names())}")
    for p in package_names:
        packages.specs(p)
    pairs: list[tuple[str, str]] = []  # (sink, package)
    if mutants:
        # the mutants first, then the other weak sinks (at-least-once), each in registration order
        weak = sorted((s for s in sinks.entries() if s.expect == "invalid" and s.targeted_by),
                      key=lambda s: not s.mutant)
        for s in weak:
            for p in package_names or [s.targeted_by]:
                pairs.append((s.name, p))
        # then the weak cluster configs, the eos sink on each, against the package that loses their data
        configs = [(d.name, p) for d in durability.CONFIGS.values() if d.targeted_by and weak_configs
                   for p in package_names or [d.targeted_by]]
        used = list(dict.fromkeys([*(p for _, p in pairs), *(p for _, p in configs)]))
        pairs = [(sinks.DEFAULT, p) for p in used] + pairs
        # and the traps (packages no pipeline survives unharmed): the eos sink caught under each
        pairs += [(sinks.DEFAULT, p) for p in packages.PACKAGES if p in packages.EXPECT_INVALID
                  and not package_names and (sinks.DEFAULT, p) not in pairs]
    else:
        for s in sinks_:
            sinks.get(s)  # ValueError naming the known sinks
        pairs = [(s, p) for p in package_names for s in sinks_]
    cells = []
    for sink, pkg in pairs:
        specs = _fitting(packages.specs(pkg), sinks.get(sink).capabilities, performs)
        if not specs:
            raise ValueError(f"the {sink} sink can take none of the {pkg} package's faults"
                             + (" that the backend can perform" if performs is not None else ""))
        for w in workloads:
            for k in range(test_count):
                seed = seed_base + k
                expect = "invalid" if pkg in packages.EXPECT_INVALID else sinks.get(sink).expect
                cells.append(Cell(sink, w, pkg, seed, expect, fit_time_limit(specs, time_limit, seed),
                                  performs=performs))
    for name, pkg in (configs if mutants and weak_configs else []):
        specs = _fitting(packages.specs(pkg), sinks.get(sinks.DEFAULT).capabilities, performs)
        if not specs:
            continue  # the backend cannot make this config lose data (left_out says which faults)
        for w in workloads:
            for k in range(test_count):
                cells.append(Cell(sinks.DEFAULT, w, pkg, seed_base + k, "invalid",
                                  fit_time_limit(specs, time_limit, seed_base + k), cluster_config=name,
                                  performs=performs))
    return cells


def _user_cells(pipeline_cmd: str, workloads: list[str], package_names: list[str], test_count: int,
                time_limit: float, mutants: bool, seed_base: int, performs: frozenset[str] | None) -> list[Cell]:
    """:func:`plan_cells` for a user's ``--pipeline-cmd`` job (see there)."""
    if mutants:
        raise ValueError("--mutants runs the bundled sink's mutants; with --pipeline-cmd drop --mutants")
    if workloads != ["keyed"]:
        raise ValueError("a --pipeline-cmd pipeline is checked as the keyed workload (docs/pipeline-contract.md): "
                         "drop --workload")
    if test_count < 1:
        raise ValueError(f"--test-count must be ≥ 1, got {test_count}")
    label, cells = user_label(pipeline_cmd), []
    for pkg in package_names:
        specs = _fitting(packages.specs(pkg), frozenset(), performs)
        for k in range(test_count if specs else 0):
            cells.append(Cell(label, "keyed", pkg, seed_base + k, "valid",
                              fit_time_limit(specs, time_limit, seed_base + k), pipeline_cmd, performs=performs))
    if not cells:
        why = "; ".join(f"{s} ({_needs(s, frozenset())})" for p in package_names for s in packages.specs(p))
        raise ValueError(f"a --pipeline-cmd pipeline can take none of the faults of {', '.join(package_names)}: "
                         f"{why}. Choose a package with faults that need no hooks (process, network, pause, "
                         "upgrade)")
    return cells


def left_out(cells: list[Cell]) -> list[dict]:
    """The faults of the cells' packages that their system under test cannot take, as ``[{"sut",
    "package", "spec", "why"}]``, once per (system under test, package); ``why`` names the missing sink
    capabilities (``sinks/base.py`` CAPABILITIES). The certificate lists them, so that a narrowed package
    is never mistaken for the whole one."""
    out, seen = [], set()
    for c in cells:
        if (c.label, c.package) in seen:
            continue
        seen.add((c.label, c.package))
        for spec in packages.specs(c.package):
            if not _fitting([spec], c.capabilities):
                out.append({"sut": c.label, "package": c.package, "spec": spec, "why": _needs(spec, c.capabilities)})
            elif not _fitting([spec], c.capabilities, c.performs):
                out.append({"sut": c.label, "package": c.package, "spec": spec,
                            "why": "the backend cannot perform it"})
            elif _fitting([spec], c.capabilities, c.performs) != [spec]:
                kept = ", ".join(_fitting([spec], c.capabilities, c.performs))
                out.append({"sut": c.label, "package": c.package, "spec": spec,
                            "why": f"the backend performs only {kept}"})
    return out


def _needs(spec: str, capabilities: frozenset[str]) -> str:
    """Why a system under test with ``capabilities`` cannot take ``spec``: ``needs <capabilities>``."""
    return "needs " + " and ".join(CAPABILITIES[m] for m in sorted(catalog.sink_needs(spec) - capabilities))


def cell_specs(cell: Cell) -> list[str]:
    """The package's faults that the cell's system under test can take (``onceproof.nemesis.catalog.for_sink``:
    e.g. ``zombie-task`` needs the transactional sink's hooks, so at-least-once and a user's job run
    ``process`` without it)."""
    return _fitting(packages.specs(cell.package), cell.capabilities, cell.performs)


def _fitting(specs: list[str], capabilities: frozenset[str], performs: frozenset[str] | None = None) -> list[str]:
    """``specs`` a system under test with ``capabilities`` can take; a fault without a target is kept when
    any target fits (it then draws only those, ``TestConfig.target_choices``). With ``performs`` (a
    backend's capabilities), a spec the backend cannot perform whole is replaced by its targets it can
    (``slow-network`` → ``slow-network:bandwidth`` on the ssh backend), or dropped when there are none."""
    out = []
    for s in (s for s in specs if catalog.for_sink(catalog.expand(s), capabilities)[0]):
        targets = catalog.expand(s)
        if performs is None or all(can_perform(performs, t) for t in targets):
            out.append(s)
        else:
            out += [t for t in targets if can_perform(performs, t) and catalog.for_sink([t], capabilities)[0]]
    return out


def run_argv(run_args: list[str]) -> list[str]:
    """The argv of ``onceproof run <run_args>`` as this Python runs it (no console script needed)."""
    return [sys.executable, "-c", "import sys; from onceproof.harness.cli import main; sys.exit(main())", "run",
            *run_args]


def new_run(results_root: Path, test: str, before: list[Path]) -> Path | None:
    """The newest run directory of ``test`` (``onceproof.store.runs.runs_of``) that is not in ``before`` (the runs
    listed before a run started), or ``None`` when that run made none (it crashed first)."""
    return next((r for r in runs_of(results_root, test) if r not in before), None)


def rest_of_group(cells: list[Cell], i: int) -> tuple[list[Cell], list[dict]]:
    """After cell ``i`` caught its mutant: ``(cells without the later seeds of cell i's (sink, workload,
    package), those seeds as not-needed records {"sink", "workload", "package", "seed", "caught_at_seed"})``.
    The claim "caught within N seeds" is settled by the first catch, so ``--stop-when-caught`` skips the rest."""
    c = cells[i]
    same = [j for j in range(i + 1, len(cells))
            if (cells[j].label, cells[j].workload, cells[j].package) == (c.label, c.workload, c.package)]
    dropped = [{"sink": cells[j].label, "workload": cells[j].workload, "package": cells[j].package,
                "seed": cells[j].seed, "caught_at_seed": c.seed} for j in same]
    return [x for j, x in enumerate(cells) if j not in set(same)], dropped


def run_command(cell: Cell, runs_dir: Path, extra: list[str]) -> list[str]:
    """The ``onceproof run`` argv of ``cell`` (as this Python runs it), results under ``runs_dir``;
    ``extra``: the user's further ``run`` options, passed as they are."""
    sut = ["--pipeline-cmd", cell.pipeline_cmd] if cell.pipeline_cmd else \
        ["--sink", cell.sink, "--workload", cell.workload, *mutants.run_args(cell.sink)]
    if cell.cluster_config:
        sut += ["--cluster-config", cell.cluster_config]
    if cell.kafka_version:
        sut += ["--kafka-version", cell.kafka_version]
    if cell.spark_version:
        sut += ["--spark-version", cell.spark_version]
    return run_argv([*sut, "--nemesis", ",".join(cell_specs(cell)), "--seed", str(cell.seed),
                     "--time-limit", f"{cell.time_limit:g}", "--test-name", cell.name,
                     "--results", str(runs_dir), *extra])


def option_value(extra: list[str], flag: str) -> str:
    """The value of ``flag`` among the user's further ``run`` options (``--flag V`` or ``--flag=V``, the
    last one given), ``""`` when absent."""
    found = ""
    for i, a in enumerate(extra):
        if a == flag and i + 1 < len(extra):
            found = extra[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found


def _versions(backend: str, extra: list[str]) -> dict[str, str]:
    # lazy: the runner loads the whole harness (backends, Spark checks); only a suite that runs needs it
    from onceproof.harness.runner import versions

    try:
        v = versions(registry.get(backend), option_value(extra, "--kafka-version"))
    except Exception as e:  # noqa: BLE001 - the certificate says so rather than failing the suite
        v = {"error": repr(e)}
    return {**v, "os": platform.platform()}


def header_versions(versions: dict[str, str], cells: list[Cell]) -> dict[str, str]:
    """The certificate header's versions: ``versions`` (what this machine's runs use), with ``kafka`` and
    ``pyspark`` naming every release of their version axis when the cells have one (each cell records its
    own). Pure."""
    out = dict(versions)
    for key, attr in (("kafka", "kafka_version"), ("pyspark", "spark_version")):
        axis = list(dict.fromkeys(getattr(c, attr) for c in cells if getattr(c, attr)))
        if axis:
            out[key] = ", ".join(axis) + " (one per cell: see the table per version pair)"
    return out


class Suite:
    """Runs ``cells`` and keeps ``<dir>/suite.json`` and the certificate up to date after each."""

    def __init__(self, name: str, cells: list[Cell], results_root: Path, command: str, backend: str,
                 extra: list[str], console: Console, left_out: list[dict] | None = None,
                 stop_when_caught: bool = False, fresh_cluster: bool = False,
                 reused: dict[str, reuse.Done] | None = None):
        self.name, self.cells, self.command, self.extra, self.console = name, cells, command, extra, console
        self.reused = dict(reused or {})  # passed cells of earlier suites by run key (--reuse): not run again
        self.fresh_cluster = fresh_cluster  # every cell starts its own brokers (no warm cluster)
        self.stop_when_caught = stop_when_caught  # skip a mutant's further seeds once one caught it
        self.not_needed: list[dict] = []  # the seeds so skipped (rest_of_group)
        self.left_out = list(left_out or [])  # faults of the packages the system under test cannot take
        self.dir = RunDir(results_root, name).path
        self.runs_dir = self.dir / "runs"
        self.warm_dir = self.dir / "warm-cluster"
        self.backend = backend
        self.records: list[dict] = []
        self.started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        self.versions: dict[str, str] = {}
        self._child: subprocess.Popen | None = None

    def doc(self) -> dict:
        """``suite.json``: name, command, times, versions, the planned cells and the finished ones."""
        return {"suite": self.name, "started": self.started,
                "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                "command": self.command, "versions": self.versions, "planned": [asdict(c) for c in self.cells],
                "left_out": self.left_out, "not_needed": self.not_needed,
                "cells": self.records, "result": certificate.suite_result(self.records)}

    def _save(self) -> dict[str, Path]:
        doc = self.doc()
        (self.dir / "suite.json").write_text(json.dumps(doc, indent=1))
        return certificate.write_certificate(doc, self.dir)

    def _table(self, running: int | None, started: float) -> Table:
        t = Table(title=f"{self.name}: {len(self.records)}/{len(self.cells)} cells", expand=False)
        for h in ("#", "sink", "workload", "package", "seed", "expect", "verdict", "elapsed", ""):
            t.add_column(h)
        for i, c in enumerate(self.cells):
            rec = self.records[i] if i < len(self.records) else None
            if rec:
                ok = "[green]PASS[/]" if rec["passed"] else "[red]FAIL[/]"
                t.add_row(str(i + 1), c.label, c.workload, c.package, str(c.seed), c.expect, rec["verdict"],
                          "reused" if rec.get("reused_from") else f"{rec['elapsed_s']:.0f}s", ok)
            elif i == running:
                t.add_row(str(i + 1), c.label, c.workload, c.package, str(c.seed), c.expect, "[yellow]running[/]",
                          f"{time.monotonic() - started:.0f}s", "")
            else:
                t.add_row(str(i + 1), c.label, c.workload, c.package, str(c.seed), c.expect, "[dim]queued[/]", "", "")
        done = [r["elapsed_s"] for r in self.records if not r.get("reused_from")]
        if done:
            left = len(self.cells) - len(self.records)
            mean = statistics.mean(done)
            t.caption = f"ETA {left * mean / 60:.0f} min ({left} cells left, mean {mean:.0f}s a cell)"
        return t

    def run(self) -> int:
        """Run every cell; returns the suite's exit code. Ctrl-C (or SIGTERM) stops the running cell (its
        own teardown, ≤ :data:`CELL_STOP_GRACE_S` s), writes what was learned and returns 255."""
        def on_term(_sig, _frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_term)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.versions = header_versions(_versions(self.backend, self.extra), self.cells)
        self.console.print(f"[bold]onceproof test-all[/] {self.name}: {len(self.cells)} cells → {self.dir}")
        warm_cluster = self._warm_cluster()
        try:
            return self._run_cells(warm_cluster)
        finally:
            if warm_cluster is not None:
                with self.console.status("stopping the warm cluster"):
                    warm_cluster.stop()

    def _warm_cluster(self):
        """The cluster the cells lease (``harness/warm.py``), started here on the suite's broker count and Kafka
        release; ``None`` with ``--fresh-cluster``, on a backend without warm clusters, or when it fails to
        start (then every cell starts its own, and the console says why)."""
        # lazy: the gate's Kafka client; a suite that only plans (--dry-run) never needs it
        from onceproof.harness import warm

        backend = registry.get(self.backend)
        if self.fresh_cluster or not backend.warm_clusters:
            return None
        brokers = option_value(self.extra, "--brokers")
        try:
            with self.console.status("starting the warm cluster the cells share"):
                # behind toxiproxy and in cgroups of their own: the cells with network faults and isolation
                # lease it too (harness/warm.py)
                c = warm.start(backend, self.warm_dir, nodes=int(brokers) if brokers else 3,
                               kafka_version=option_value(self.extra, "--kafka-version"), proxied=True,
                               own_groups=True)
        except Exception as e:  # noqa: BLE001 - the cells start clusters of their own instead
            self.console.print(f"[yellow]no warm cluster ({e}): every cell starts its own[/]", soft_wrap=True)
            return None
        self.console.print(f"warm cluster up at {c.bootstrap}: cells of its shape run on it "
                           "(--fresh-cluster: a cluster per cell)", soft_wrap=True)
        return c

    def _run_cells(self, warm_cluster) -> int:
        interrupted = False
        extra = [*self.extra, "--warm-cluster", str(self.warm_dir)] if warm_cluster else self.extra
        with Live(self._table(None, time.monotonic()), console=self.console, refresh_per_second=1,
                  transient=not self.console.is_terminal) as live:
            i = -1
            while i + 1 < len(self.cells):
                i += 1
                cell = self.cells[i]
                t0, before = time.monotonic(), runs_of(self.runs_dir, cell.name)
                argv = run_command(cell, self.runs_dir, extra)
                key = reuse.run_key(argv[3:], cell.expect)
                if key in self.reused:
                    self._record(i, reuse.reused_record(self.reused[key], self.dir), live, t0)
                    continue
                log = self.dir / "cells" / f"{i + 1:03d}-{cell.name}-seed{cell.seed}.log"
                log.parent.mkdir(exist_ok=True)
                with open(log, "w") as out:
                    out.write("$ " + shlex.join(["onceproof", *argv[3:]]) + "\n")
                    out.flush()
                    # its own session: a terminal's Ctrl-C reaches the suite only, which forwards one SIGINT
                    self._child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                                   env={**os.environ, "COLUMNS": "160"})
                    try:
                        while self._child.poll() is None:
                            live.update(self._table(i, t0))
                            time.sleep(1)
                    except KeyboardInterrupt:
                        interrupted = True
                        self._stop_child()
                code = self._child.returncode
                self._child = None
                run_dir = new_run(self.runs_dir, cell.name, before)
                rec = certificate.cell_from_run(run_dir, sink=cell.label, workload=cell.workload,
                                                package=cell.package, seed=cell.seed, expect=cell.expect,
                                                exit_code=code, elapsed_s=round(time.monotonic() - t0, 1),
                                                suite_dir=self.dir)
                rec["log"] = str(log.relative_to(self.dir))
                rec["run_key"] = key
                rec["time_limit_s"] = cell.time_limit
                if cell.kafka_version:
                    rec["kafka"] = rec.get("kafka") or cell.kafka_version
                if cell.spark_version:
                    rec["pyspark"] = rec.get("pyspark") or cell.spark_version
                self._record(i, rec, live, t0)
                if interrupted:
                    break
        paths = self._save()
        result = certificate.suite_result(self.records)
        self.console.print(f"[bold]{result}[/] ({sum(r['passed'] for r in self.records)}/{len(self.records)} "
                           f"cells passed{', interrupted' if interrupted else ''}); certificate: {paths['md']}, "
                           f"{paths['html']}; JUnit: {paths['junit']}")
        spent = cost.suite_cost(self.records)
        if spent["cells"]:
            self.console.print(f"time: {cost.cost_line(spent)}")
        if any(c.expect == "invalid" for c in self.cells):
            for row in certificate.detection_table(self.records):
                self.console.print(f"  {row['mutant']:<24} × {row['package']:<8} caught {row['caught']}/{row['runs']}"
                                   f"  {certificate.anomalies_text(row['anomalies'])}")
        return 255 if interrupted else certificate.suite_exit_code(self.records)

    def _record(self, i: int, rec: dict, live: Live, t0: float) -> None:
        """Cell ``i``'s record kept, the later seeds of a caught mutant dropped (``--stop-when-caught``),
        ``suite.json`` and the certificate written, the table and the console told."""
        cell = self.cells[i]
        self.records.append(rec)
        if self.stop_when_caught and cell.expect == "invalid" and rec.get("caught"):
            self.cells, skipped = rest_of_group(self.cells, i)
            self.not_needed += skipped
        self._save()
        live.update(self._table(None, t0))
        how = f"reused from {rec['reused_from']}" if rec.get("reused_from") else f"in {rec['elapsed_s']:.0f}s"
        if not self.console.is_terminal or rec.get("reused_from"):
            self.console.print(f"cell {i + 1}/{len(self.cells)} {cell.name} seed {cell.seed}: "
                               f"{rec['verdict']} ({'PASS' if rec['passed'] else 'FAIL'}) {how}", soft_wrap=True)

    def _stop_child(self) -> None:
        """SIGINT the running cell (its run tears down and writes its verdict), then SIGKILL it after
        :data:`CELL_STOP_GRACE_S` seconds."""
        p = self._child
        if p is None or p.poll() is not None:
            return
        try:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=CELL_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            p.kill()
            p.wait(timeout=10)
