"""``onceproof``: the command line (Jepsen's ``jepsen.cli``).

Commands: ``run`` (a whole test), ``check`` (a stored run, or any pipeline's live topics), ``report``,
``index``, ``serve``, ``prune`` (delete old runs), ``faults``, ``cluster`` (``up`` / ``status`` / ``down``
for ad hoc sessions), ``deps`` (resolve the jars ahead of time). ``run`` and the ``cluster`` commands
take ``--backend`` (``backends/registry.py``).

Exit codes (Jepsen's): 0 valid, 1 invalid, 2 unknown, 254 usage error (bad option or argument; one
line on stderr, nothing started), 255 crashed (one line on stderr naming the cause; the traceback goes
to a log file whose path that line gives). Every entry point goes through :func:`main`.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

try:  # typer ≥ 0.22 vendors click
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer on click
    from click.exceptions import UsageError

from onceproof.backends import registry
from onceproof.backends.base import FOREIGN, Backend, BackendError, Cluster, ClusterError, ClusterShape
from onceproof.backends.cache import cache_dir
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.store.runfiles import RESULTS, TEST, RunFiles
from onceproof.store.runs import DEFAULT_ROOT

EXIT_USAGE, EXIT_CRASHED = 254, 255
EXIT = {"valid": 0, "invalid": 1, "unknown": 2, "crashed": EXIT_CRASHED}
DEFAULT_CLUSTER_DIR = cache_dir() / "cluster"


class _App(typer.Typer):
    """The console script calls ``app()`` with no arguments: that goes through :func:`main` too, so the
    exit codes hold whether the entry point names ``onceproof.harness.cli:app`` or ``onceproof.harness.cli:main``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs:
            sys.exit(main())
        return super().__call__(*args, **kwargs)


app = _App(add_completion=False, no_args_is_help=True,
           help="Prove a PySpark Kafka→Kafka pipeline delivers every record exactly once while executors, "
                "drivers and brokers fail. Exit codes: 0 valid, 1 invalid, 2 unknown, 254 usage error, "
                "255 crashed.")
cluster_app = typer.Typer(no_args_is_help=True, help="A local Kafka cluster for ad hoc sessions.")
app.add_typer(cluster_app, name="cluster")
console = Console(width=None if sys.stdout.isatty() else 120)

# Where the current command's crash traceback goes: a path, or a function giving one (None: a temp file).
_crash: dict[str, Any] = {"cmd": "onceproof", "log": None}


def _on_crash(cmd: str, log: Path | Callable[[], Path | None] | None) -> None:
    _crash.update(cmd=f"onceproof {cmd}", log=log)


def _usage(message: str, option: str | None = None) -> typer.BadParameter:
    """A usage error (exit 254) for ``option``."""
    return typer.BadParameter(message, param_hint=option)


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    0 valid, 1 invalid, 2 unknown (from ``run`` / ``check``; other commands 0 on success), 254 usage
    error: one line on stderr, 255 crashed: one line on stderr naming the cause and the file holding the
    traceback (``<run_dir>/logs/<command>-error.log`` when there is a writable run directory, else a
    temp file). Ctrl-C outside a run's own handling also gives 255 ("interrupted").
    """
    args = sys.argv[1:] if argv is None else list(argv)
    _crash.update(cmd="onceproof", log=None)
    try:
        rv = typer.Typer.__call__(app, args=args, prog_name="onceproof", standalone_mode=False)
    except UsageError as e:
        return _usage_exit(e)
    except Exception as e:  # noqa: BLE001 - every crash: one line, the traceback in a file
        return _crash_exit(e, args)
    except KeyboardInterrupt:
        print(f"{_crash['cmd']}: interrupted", file=sys.stderr)
        return EXIT_CRASHED
    if rv == 130:  # typer turns Ctrl-C into Exit(130)
        print(f"{_crash['cmd']}: interrupted", file=sys.stderr)
        return EXIT_CRASHED
    return rv if isinstance(rv, int) else 0


def _one_line(text: str, limit: int = 600) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _usage_exit(e: UsageError) -> int:
    ctx = getattr(e, "ctx", None)
    if type(e).__name__ == "NoArgsIsHelpError":  # the help is the message (typer's rich help prints itself)
        if e.format_message().strip():
            print(e.format_message())
        return EXIT_USAGE
    cmd = ctx.command_path if ctx is not None else "onceproof"
    print(f"{cmd}: {_one_line(e.format_message())} (see `{cmd} --help`)", file=sys.stderr)
    return EXIT_USAGE


def _crash_exit(e: BaseException, args: list[str]) -> int:
    from onceproof.checking.checks import CheckError
    from onceproof.clients.topics import TopicError

    text = (f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} onceproof {shlex.join(args)}\n"
            + "".join(traceback.format_exception(e)))
    where = _write_crash_log(text)
    own = isinstance(e, (CheckError, BackendError, TopicError, ConfigError))
    cause = str(e) if own and str(e) else f"{type(e).__name__}: {e}"
    print(f"{_crash['cmd']}: crashed: {_one_line(cause)} (traceback: {where})", file=sys.stderr)
    return EXIT_CRASHED


def _write_crash_log(text: str) -> Path:
    pref = _crash["log"]
    try:
        pref = pref() if callable(pref) else pref
    except Exception:  # noqa: BLE001 - fall back to a temp file
        pref = None
    if pref is not None:
        try:
            Path(pref).parent.mkdir(parents=True, exist_ok=True)
            with open(pref, "a") as f:
                f.write(text)
            return Path(pref)
        except OSError:
            pass
    fd, name = tempfile.mkstemp(prefix=f"{_crash['cmd'].replace(' ', '-')}-error-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)


# ------------------------------------------------------------------------------------------------ run


class _ConsoleFormatter(logging.Formatter):
    """One line per record: a traceback is replaced by where the run's log file keeps it."""

    def format(self, record: logging.LogRecord) -> str:
        s = f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            s += f": {_one_line(record.exc_info[1])} (traceback in {_RunLog.where()})"
        return s


class _RunLog(logging.Handler):
    """Every harness log record, tracebacks included, to ``$ONCEPROOF_RUN/logs/harness.log`` (the run
    directory the runner announces), or to a temp file before there is one."""

    _path: Path | None = None

    @classmethod
    def where(cls) -> Path:
        run = os.environ.get("ONCEPROOF_RUN")
        if run and (cls._path is None or cls._path.parent.parent != Path(run)):
            cls._path = RunFiles(run).harness_log
        if cls._path is None:
            fd, name = tempfile.mkstemp(prefix="onceproof-run-", suffix=".log")
            os.close(fd)
            cls._path = Path(name)
        return cls._path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            p = self.where()
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a") as f:
                f.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must not break the run
            self.handleError(record)


def _configure_run_logging(verbose: bool) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    con = logging.StreamHandler(sys.stderr)
    con.setLevel(logging.INFO if verbose else logging.WARNING)
    con.setFormatter(_ConsoleFormatter())
    fh = _RunLog(level=logging.INFO)
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(con)
    root.addHandler(fh)
    root.setLevel(logging.INFO)


def _run_error_log() -> Path | None:
    run = os.environ.get("ONCEPROOF_RUN")
    return RunFiles(run).error_log("run") if run else None


def run(**options: Any) -> None:
    """Run one test on a fresh cluster (of --backend) and print the verdict.

    Every option is validated before anything starts.

    Exit code: 0 valid, 1 invalid, 2 unknown, 254 usage error, 255 crashed.
    """
    verbose = options.pop("verbose", False)
    _on_crash("run", _run_error_log)
    os.environ.pop("ONCEPROOF_RUN", None)  # set by the runner once the run directory exists
    cfg = config_from_options(options)
    _configure_run_logging(verbose)
    from onceproof.harness import signals
    from onceproof.harness.runner import run as run_test

    signals.install()
    code, _ = run_test(cfg, console)
    raise typer.Exit(code)


def config_from_options(options: dict[str, Any]) -> TestConfig:
    """``run``'s parsed options (field name → value) as a validated config.

    Raises: ``typer.BadParameter`` (exit 254) naming the option.
    """
    try:
        return TestConfig.from_cli(options).validate()
    except ConfigError as e:
        raise _usage(e.message, e.option) from None


def _run_signature() -> inspect.Signature:
    """``run``'s parameters: one option per :class:`TestConfig` field, plus ``--verbose``."""
    hints = typing.get_type_hints(TestConfig)
    params = []
    for f in TestConfig.options():
        typ, default = hints[f.name], TestConfig.default_of(f)
        if f.metadata.get("fmt"):
            typ, default = str, f.metadata["fmt"](default)
        flag = TestConfig.flag(f)
        decls = [f"{flag}/--no-{flag[2:]}"] if typ is bool else [flag]
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=typ,
                                        default=typer.Option(default, *decls, help=f.metadata.get("help"))))
    params.append(inspect.Parameter("verbose", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                    default=typer.Option(False, "--verbose", "-v", help="log harness internals")))
    return inspect.Signature(params)


run.__signature__ = _run_signature()  # type: ignore[attr-defined]
run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}  # type: ignore
app.command("run")(run)


def parse_run_args(argv: list[str]) -> TestConfig:
    """Parse ``run``'s options (without ``onceproof run``) with this CLI's parser; not validated.

    Raises: ``UsageError`` for an unknown option or a malformed value, ``ConfigError`` for an
    unparseable fault list.
    """
    cmd = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    ctx = cmd.make_context("onceproof run", list(argv))
    params = dict(ctx.params)
    params.pop("verbose", None)
    return TestConfig.from_cli(params)


# ------------------------------------------------------------------------------------------------ check


def _finite(value: float, option: str, lo: float = 0.0, lo_open: bool = True) -> None:
    if not math.isfinite(value) or (value <= lo if lo_open else value < lo):
        raise _usage(f"must be a finite number {'>' if lo_open else '≥'} {lo:g}, got {value}", option)


def _require_run_dir(run_dir: Path) -> Path:
    """``run_dir`` resolved, if it is a run directory. Raises a usage error (254) saying what it is instead."""
    from onceproof.store import runfiles, runs

    if not run_dir.exists():
        raise _usage(f"{run_dir} does not exist", "RUN_DIR")
    if not run_dir.is_dir():
        raise _usage(f"{run_dir} is not a directory", "RUN_DIR")
    if not runs.is_run_dir(run_dir):
        hint = f"; did you mean {run_dir / runs.LATEST}?" if runs.is_run_dir(run_dir / runs.LATEST) else \
            " (e.g. results/latest)"
        raise _usage(f"{run_dir} is not a run directory: it has none of {', '.join(runfiles.MARKERS)}; give a "
                     f"run's directory{hint}", "RUN_DIR")
    return run_dir.resolve()


@app.command()
def check(
    run_dir: Path | None = typer.Argument(None, metavar="RUN_DIR", help="a stored run directory (e.g. results/latest)"),
    bootstrap: str = typer.Option("", help="check live topics on this cluster (HOST:PORT,...) instead"),
    input_topic: str = typer.Option("input", help="(live) the pipeline's input topic"),
    output_topic: str = typer.Option("output", help="(live) the pipeline's output topic"),
    group: str = typer.Option("", help="(live) the pipeline's consumer group on the input topic: the pipeline "
                                        "has caught up when its committed offsets reach the input's end offsets"),
    settle: float = typer.Option(0.0, help="(live) seconds the input's end offsets and the output's high "
                                           "watermarks and LSOs must stay unchanged for the pipeline to count "
                                           "as caught up; 0 = off"),
    recovery_timeout: float = typer.Option(60.0, help="(live) seconds to wait for the pipeline to catch up "
                                                      "and for open output transactions to end"),
    results: Path = typer.Option(DEFAULT_ROOT, help="(live) results root: the check is stored as "
                                                    "<results>/check-<output-topic>/<time>/"),
    workload: str = typer.Option("keyed", help="(live) what the output holds: keyed (every input record once, "
                                               "in order per key) or counter (running count/sum/max_seq "
                                               "aggregates per key, checked against input prefixes)"),
    file_sink: Path | None = typer.Option(None, help="(live) the pipeline writes Spark's file sink: its output "
                                                        "directory (with _spark_metadata) instead of --output-topic"),
    file_read: str = typer.Option("committed", help="a file sink's output read as committed (the files its "
                                                    "_spark_metadata log lists) or listing (every data file: the "
                                                    "mutant reader of a careless downstream job)"),
    engine: str = typer.Option("pandas", help="what runs the checks: pandas (in this process) or spark (Spark "
                                              "jobs on --spark-master, for runs too large for one machine; with "
                                              "RUN_DIR, --bootstrap reads the topics of a run without snapshots)"),
    spark_master: str = typer.Option("local[2]", help="(--engine spark) the Spark master URL"),
    spark_conf: list[str] = typer.Option([], help="(--engine spark) a Spark setting KEY=VALUE, e.g. "
                                                  "spark.driver.memory=8g (repeatable)"),
    json_out: bool = typer.Option(False, "--json", help="print the full result as JSON"),
) -> None:
    """Check a stored run offline, or any pipeline's topics live.

    Live: without --group or --settle nothing shows that the pipeline has processed all its input, so
    records not in the output make the verdict unknown, not invalid. Live contract: Kafka key = workload
    key (UTF-8); value = JSON object with "key" and "seq" (int, contiguous from 0 per key). Provenance
    headers (op.batch, op.txn_id, ...) are optional.

    Exit code: 0 valid, 1 invalid, 2 unknown, 254 usage error, 255 crashed (e.g. a damaged file).
    """
    _on_crash("check", None)
    eng, opts = _engine(engine, spark_master, spark_conf, bootstrap if run_dir is not None else "",
                        input_topic, output_topic)
    if (run_dir is None) == (not bootstrap) and not (run_dir is not None and eng.reads_topics_for_run_dir):
        raise _usage("give either RUN_DIR or --bootstrap HOST:PORT (not both)")
    if run_dir is not None:
        if group or settle or workload != "keyed" or file_sink:
            raise _usage("only with --bootstrap (a stored run is checked as it was saved)",
                         "--group" if group else "--settle" if settle else "--workload" if workload != "keyed"
                         else "--file-sink")
        rd = _require_run_dir(run_dir)
        why = eng.refusal(rd, workload=workload, file_sink=file_sink, file_read=file_read)
        if why:
            raise _usage(why, "--engine")
        _on_crash("check", RunFiles(rd).error_log("check"))
        result = eng.check_saved(rd, file_read=file_read if file_read != "committed" else None, options=opts)
        result["run_dir"] = str(rd)
    else:
        from onceproof.workloads import registry as workloads

        if workload not in workloads.names():
            raise _usage(f"unknown workload {workload!r}; choose one of {', '.join(workloads.names())}", "--workload")
        if file_read not in ("committed", "listing"):
            raise _usage(f"unknown file reader {file_read!r}; choose committed or listing", "--file-read")
        if file_sink is not None and not (file_sink / "_spark_metadata").is_dir():
            raise _usage(f"{file_sink} has no _spark_metadata: give the directory the file sink writes to "
                         "(writeStream...option('path', ...))", "--file-sink")
        why = eng.refusal(None, workload=workload, file_sink=file_sink, file_read=file_read)
        if why:
            raise _usage(why, "--engine")
        result = _check_live(bootstrap, input_topic, output_topic, group, settle, recovery_timeout, results,
                             quiet=json_out, workload=workload, file_sink=file_sink, file_read=file_read,
                             engine=eng, options=opts)
    if json_out:
        print(json.dumps(result, indent=2, default=str))
    else:
        from onceproof.harness.summary import summarize

        summarize(result, console)
        for w in result.get("warnings", []):
            console.print(f"[yellow]warning: {w}[/]", soft_wrap=True)
    raise typer.Exit(EXIT.get(result["verdict"], EXIT_CRASHED))


def _engine(name: str, spark_master: str, spark_conf: list[str], bootstrap: str, input_topic: str,
            output_topic: str):
    """The ``--engine`` and its options (``checking/engines.py``). Raises a usage error (254) for an unknown
    engine, a ``--spark-*`` option without ``--engine spark`` or a ``--spark-conf`` that is not KEY=VALUE."""
    from onceproof.checking import engines

    try:
        eng = engines.get(name)
    except ValueError as e:
        raise _usage(str(e), "--engine") from None
    if name != "spark" and (spark_master != engines.Options.spark_master or spark_conf):
        raise _usage("only with --engine spark",
                     "--spark-master" if spark_master != engines.Options.spark_master else "--spark-conf")
    conf = {}
    for kv in spark_conf:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise _usage(f"must be KEY=VALUE (e.g. spark.driver.memory=8g), got {kv!r}", "--spark-conf")
        conf[k.strip()] = v
    return eng, engines.Options(spark_master=spark_master, spark_conf=conf, bootstrap=bootstrap,
                                input_topic=input_topic, output_topic=output_topic)


def _check_live(bootstrap: str, input_topic: str, output_topic: str, group: str, settle: float,
                recovery_timeout: float, results: Path, quiet: bool, workload: str = "keyed",
                file_sink: Path | None = None, file_read: str = "committed", engine=None, options=None) -> dict:
    """``check --bootstrap``: wait until caught up, read, check (with ``engine``, default pandas), and store
    a run directory (``results.json``, ``report.html``, ``junit.xml``, the parquet snapshots)."""
    from onceproof.checking import checks as checking
    from onceproof.checking import engines, recovery
    from onceproof.store.runs import RunDir

    _finite(recovery_timeout, "--recovery-timeout")
    _finite(settle, "--settle", lo_open=False)
    if settle and settle >= recovery_timeout:
        raise _usage(f"must be shorter than --recovery-timeout ({recovery_timeout:g}s), got {settle:g}",
                     "--settle")
    if results.exists() and not results.is_dir():
        raise _usage(f"{results} is not a directory", "--results")
    out = Console(stderr=True, width=console.width) if quiet else console
    clients = logging.getLogger("onceproof.librdkafka")  # librdkafka's own chatter: a file, not the console
    clients.propagate = False
    clients.addHandler(logging.NullHandler())
    checking.probe(bootstrap, input_topic, output_topic)
    rd = RunDir(results, f"check-{output_topic}")
    _on_crash("check", rd.error_log("check"))
    fh = logging.FileHandler(rd.clients_log)
    fh.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    clients.addHandler(fh)
    clients.setLevel(logging.INFO)
    argv = ["onceproof", "check", "--bootstrap", bootstrap, "--input-topic", input_topic, "--output-topic",
            output_topic, *(["--group", group] if group else []), *(["--settle", f"{settle:g}"] if settle else []),
            "--recovery-timeout", f"{recovery_timeout:g}", "--results", str(results),
            *(["--workload", workload] if workload != "keyed" else []),
            *(["--file-sink", str(file_sink), "--file-read", file_read] if file_sink else []),
            *_engine_argv(engine, options)]
    name = rd.path.parent.name
    rd.write_json(TEST, {"kind": "check", "name": name, "replay": shlex.join(argv),
                                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                "config": {"bootstrap": bootstrap, "input_topic": input_topic,
                                           "output_topic": output_topic, "group": group, "settle": settle,
                                           "recovery_timeout": recovery_timeout, "nemesis": [],
                                           "workload": workload,
                                           "file_sink": str(file_sink) if file_sink else None}})
    out.print(f"onceproof check {bootstrap} {input_topic} → {output_topic}: {rd.path}", soft_wrap=True)
    st = recovery.caught_up(bootstrap, input_topic, output_topic, group=group, settle_s=settle,
                            timeout_s=recovery_timeout,
                            progress=lambda s: out.print(f"  waiting ({s.seconds:.0f}s): {'; '.join(s.reasons)}",
                                                         soft_wrap=True))
    engine = engine or engines.get(engines.DEFAULT)
    result = engine.check_live(bootstrap, input_topic, output_topic, rd.path, st, workload=workload,
                               file_sink=file_sink.resolve() if file_sink else None, file_read=file_read,
                               options=options or engines.Options())
    result.update(test=name, run_dir=str(rd.path), replay=shlex.join(argv))
    rd.write_json(RESULTS, result)
    try:
        from onceproof.report.html import build_report
        from onceproof.report.index import build_index
        from onceproof.report.junit import write_junit

        write_junit(rd.path)
        build_report(rd.path)
        build_index(results)
        out.print(f"report: {rd.report}", soft_wrap=True)
    except Exception as e:  # noqa: BLE001 - the verdict stands without its report
        out.print(f"[yellow]report failed: {_one_line(e)} (rebuild with `onceproof report {rd.path}`)[/]",
                  soft_wrap=True)
    return result


def _engine_argv(engine, options) -> list[str]:
    """The ``--engine`` options of a replay command (none for the default engine)."""
    if engine is None or engine.name == "pandas":
        return []
    return (["--engine", engine.name, "--spark-master", options.spark_master]
            + [a for k, v in options.spark_conf.items() for a in ("--spark-conf", f"{k}={v}")])


@app.command()
def report(run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="a run directory, e.g. results/latest"),
           standalone: bool = typer.Option(False, "--standalone", help="inline plotly's JavaScript (~4.8 MB) so "
                                           "report.html works copied on its own; by default a report inside a "
                                           "results directory loads the one copy in <results>/assets/")) -> None:
    """Rebuild a run's report.html and junit.xml from its files.

    Exit code: 0 written, 254 not a run directory, 255 crashed.
    """
    from onceproof.report.html import build_report
    from onceproof.report.junit import write_junit

    _on_crash("report", None)
    rd = _require_run_dir(run_dir)
    _on_crash("report", RunFiles(rd).error_log("report"))
    write_junit(rd)
    console.print(f"report: {build_report(rd, standalone=standalone)}", soft_wrap=True)


@app.command()
def index(results: Path = typer.Argument(DEFAULT_ROOT, metavar="RESULTS", help="results root")) -> None:
    """Write results/index.html: every run with its verdict and a link to its report."""
    from onceproof.report.index import build_index

    _on_crash("index", None)
    if results.exists() and not results.is_dir():
        raise _usage(f"{results} is not a directory", "RESULTS")
    console.print(f"index: {build_index(results, build_missing=True)}", soft_wrap=True)


@app.command()
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
    from onceproof.store import retention
    from onceproof.store.runs import runs_of, tests_in

    _on_crash("prune", None)
    if keep_last < 1:
        raise _usage(f"must be ≥ 1, got {keep_last} (0 would keep everything: nothing to do)", "--keep-last")
    if not results.is_dir():
        raise _usage(f"{results} is not a directory", "RESULTS")
    if test and not runs_of(results, test):
        raise _usage(f"no runs of {test!r} under {results}; tests there: "
                     f"{', '.join(tests_in(results)) or 'none'}", "--test")
    gone = ({test: retention.prune(results, test, keep_last, dry_run=dry_run)} if test
            else retention.prune_all(results, keep_last, dry_run=dry_run))
    n = 0
    for t, runs in gone.items():
        for r in runs:
            n += 1
            console.print(f"{'would delete' if dry_run else 'deleted'} {r}", soft_wrap=True)
    console.print(f"{n} run(s) {'would be ' if dry_run else ''}deleted; kept the newest {keep_last} per test"
                  + ("" if dry_run or not n else "; `onceproof index` refreshes index.html"), soft_wrap=True)


@app.command()
def serve(results: Path = typer.Argument(DEFAULT_ROOT, metavar="RESULTS", help="results root"),
          port: int = typer.Option(8000, help="TCP port on 127.0.0.1")) -> None:
    """Browse the runs: builds results/index.html and serves the results directory on 127.0.0.1."""
    import functools
    import http.server

    from onceproof.report.index import build_index

    _on_crash("serve", None)
    if not 0 < port < 65536:
        raise _usage(f"must be a TCP port 1..65535, got {port}", "--port")
    build_index(results, build_missing=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(results))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        console.print(f"serving {results} at http://127.0.0.1:{port}/index.html (Ctrl-C to stop)")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


@app.command("test-all", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def test_all(
    ctx: typer.Context,
    sink: str = typer.Option("eos", help="comma-separated sinks (pipeline/sinks.py); ignored with --mutants"),
    workload: str = typer.Option("keyed", help="comma-separated workloads (workloads/registry.py)"),
    nemesis_package: str = typer.Option("", help="comma-separated fault packages: process, pause, network, commit, "
                                                 "upgrade, all (nemesis/packages.py); default: process,commit, or "
                                                 "with --mutants each mutant's own"),
    test_count: int = typer.Option(1, help="seeds per cell (seed-base, seed-base+1, ...)"),
    seed_base: int = typer.Option(1, help="the first seed"),
    mutants: bool = typer.Option(False, "--mutants", help="the detection table: every mutant and at-least-once "
                                                          "against the package aimed at it, eos as the control"),
    time_limit: float = typer.Option(30.0, help="each run's --time-limit, s (raised to what a package needs)"),
    suite_name: str = typer.Option("", help="results/<suite-name>/<timestamp>/; default test-all or mutants"),
    results: Path = typer.Option(DEFAULT_ROOT, help="results root directory"),
    backend: str = typer.Option(registry.DEFAULT, help="the backend of every run: " + ", ".join(registry.names())),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the cells and stop"),
) -> None:
    """Run a matrix of tests (sink × workload × fault package × seed) and write a certificate.

    Every cell is one `onceproof run` (its own cluster, teardown and report, under <suite>/runs/).
    Further `run` options after the known ones (e.g. --rate 500 --partitions 4) go to every run.
    Writes suite.json, certificate.md, certificate.html and junit.xml. PASS requires every
    exactly-once cell to be valid and every mutant cell to be caught.

    Exit code: the worst cell's (a caught mutant counts as passed); 255 when interrupted.
    """
    from onceproof.harness import suite
    from onceproof.nemesis import packages

    _on_crash("test-all", None)
    _finite(time_limit, "--time-limit")
    try:
        pkgs = packages.parse(nemesis_package) if nemesis_package else ([] if mutants else ["process", "commit"])
        cells = suite.plan_cells(sinks_=[x.strip() for x in sink.split(",") if x.strip()],
                                 workloads=[x.strip() for x in workload.split(",") if x.strip()],
                                 package_names=pkgs, test_count=test_count, time_limit=time_limit,
                                 mutants=mutants, seed_base=seed_base)
    except ValueError as e:
        raise _usage(str(e)) from None
    extra = list(ctx.args)
    for bad in ("--sink", "--workload", "--nemesis", "--seed", "--test-name", "--results", "--schedule"):
        if any(a == bad or a.startswith(bad + "=") for a in extra):
            raise _usage(f"{bad} is set by test-all for each cell; use test-all's own options", bad)
    if backend != registry.DEFAULT:
        extra += ["--backend", backend]
    if dry_run:
        for c in cells:
            console.print(f"{c.name} seed {c.seed} expect {c.expect} time-limit {c.time_limit:g}s: "
                          + " ".join(suite.run_command(c, results / "<suite>" / "runs", extra)[3:]), soft_wrap=True)
        raise typer.Exit(0)
    name = suite_name or ("mutants" if mutants else "test-all")
    command = shlex.join(["onceproof", "test-all", *sys.argv[2:]]) if sys.argv[1:2] == ["test-all"] else "onceproof test-all"
    code = suite.Suite(name, cells, results, command, backend, extra, console).run()
    raise typer.Exit(code)


@app.command()
def shrink(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="a failing (invalid) run directory"),
    max_runs: int = typer.Option(12, help="at most this many candidate runs"),
) -> None:
    """Shrink a failing run's fault schedule to a 1-minimal one that still fails with the same anomaly
    class (delta debugging, ddmin): each candidate is replayed with the same workload seed.

    Writes RUN_DIR/shrink/shrink.json (every candidate and its verdict) and prints the replay command of
    the minimal schedule (`onceproof run ... --schedule FILE`).
    """
    from onceproof.harness import shrink as shrinker
    from onceproof.harness import suite
    from onceproof.store.runs import runs_of

    _on_crash("shrink", None)
    run_dir = _require_run_dir(run_dir)
    if max_runs < 1:
        raise _usage(f"must be ≥ 1, got {max_runs}", "--max-runs")
    out = run_dir / "shrink"

    def run_candidate(command: str) -> Path | None:
        argv = shlex.split(command)
        if argv[:2] != ["onceproof", "run"]:
            raise ValueError(f"not a run command: {command}")
        args = argv[2:]
        # a candidate's workload needs to last only until its last fault (+ 10 s), not the whole original
        # --time-limit: same seed, same schedule offsets, a shorter tail (the run still goes on until every
        # fault of the schedule had its turn)
        from onceproof.harness.config import read_schedule

        last = max((f["at_s"] for f in read_schedule(args[args.index("--schedule") + 1])), default=0.0)
        if "--time-limit" in args:
            i = args.index("--time-limit")
            args[i + 1] = f"{min(float(args[i + 1]), max(15.0, last + 10)):g}"
        results = Path(args[args.index("--results") + 1]) if "--results" in args else DEFAULT_ROOT
        name = args[args.index("--test-name") + 1]
        before = runs_of(results, name)
        subprocess.run(suite.run_argv(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return suite.new_run(results, name, before)

    try:
        res = shrinker.shrink(run_dir, max_runs=max_runs, out_dir=out, run=run_candidate,
                              echo=lambda line: console.print(line, markup=False, highlight=False),
                              test_name=f"{run_dir.parent.name}-shrink")
    except ValueError as e:
        raise _usage(str(e)) from None
    console.print(f"minimal schedule: {[f['f'] for f in res['minimal']]} "
                  f"({'1-minimal' if res.get('one_minimal') else 'not proven 1-minimal: --max-runs reached'}) "
                  f"after {res['runs']} run(s); {out / 'shrink.json'}")
    console.print(f"replay: [cyan]{res['replay']}[/]", soft_wrap=True)


@app.command()
def faults() -> None:
    """List the faults, their targets and what each one does."""
    from onceproof.nemesis import catalog

    for name, cls in catalog.FAULTS.items():
        doc = (cls.__doc__ or __import__(cls.__module__, fromlist=["x"]).__doc__ or "").strip()
        targets = ", ".join(getattr(cls, "target_choices", ())) or "-"
        console.print(f"[bold]{name}[/]  targets: {targets}\n  {doc.splitlines()[0] if doc else ''}")


_BACKEND_HELP = "the backend that runs the cluster: " + ", ".join(registry.names())


def _backend(name: str) -> Backend:
    """The backend called ``name``; a usage error (254) naming the known ones otherwise."""
    try:
        return registry.get(name)
    except BackendError as e:
        raise _usage(str(e), "--backend") from None


@app.command()
def deps(backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP)) -> None:
    """Fetch what a backend's runs need ahead of time (local: the Kafka broker and Spark connector jars,
    from Maven Central)."""
    _on_crash("deps", None)
    for line in _backend(backend).prepare():
        console.print(line)


# ------------------------------------------------------------------------------------------------ cluster

_DIR_HELP = ("cluster data and state directory (default: $ONCEPROOF_CACHE/cluster, i.e. "
             "~/.cache/onceproof/cluster, whatever the working directory)")


def _attach(b: Backend, dir: Path) -> Cluster | None:
    """The detached cluster in ``dir``, or ``None`` (with the reason on the console) when there is none."""
    try:
        return b.attach(dir)
    except ClusterError as e:
        console.print(str(e), soft_wrap=True)
        return None


@cluster_app.command("up")
def cluster_up(
    dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help=_DIR_HELP),
    brokers: int = typer.Option(3, help="KRaft nodes (combined broker+controller), 1..9"),
    backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP),
) -> None:
    """Start a KRaft cluster that stays up after this command; prints the bootstrap servers."""
    _on_crash("cluster up", None)
    if not 1 <= brokers <= 9:
        raise _usage(f"must be 1..9, got {brokers}", "--brokers")
    b = _backend(backend)
    try:
        existing = b.attach(dir)
    except ClusterError:
        existing = None
    if existing is not None and any(existing.state(n).alive for n in existing.nodes):
        console.print(f"[yellow]a cluster is already running from {dir}; run `onceproof cluster down` first[/]")
        raise typer.Exit(1)
    c = b.cluster(ClusterShape(dir.resolve(), nodes=brokers, detached=True))
    _on_crash("cluster up", c.log_dir / "cluster-up-error.log")
    with console.status("starting Kafka"):
        try:
            c.up()
        except BaseException:
            c.down()
            raise
    console.print(f"Kafka {c.version} up: [bold]{c.bootstrap}[/]  (logs: {c.log_dir})", soft_wrap=True)
    print(c.bootstrap)


@cluster_app.command("status")
def cluster_status(dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help=_DIR_HELP),
                   backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP)) -> None:
    """Show each broker's pid and whether it is alive. Exit 0 when every broker is up, else 1."""
    _on_crash("cluster status", None)
    c = _attach(_backend(backend), dir)
    if c is None:
        raise typer.Exit(1)
    alive = 0
    for i in c.nodes:
        st = c.state(i)
        alive += st.alive
        state = "up" if st.alive else ("stale: that pid is not this cluster's broker" if st.status == FOREIGN
                                       else "down")
        console.print(f"broker {i}: {c.address(i)} pid={st.pid} {state}")
    console.print(f"bootstrap: {c.bootstrap}  (state: {c.state_file})", soft_wrap=True)
    raise typer.Exit(0 if alive == len(c.nodes) else 1)


@cluster_app.command("down")
def cluster_down(dir: Path = typer.Option(DEFAULT_CLUSTER_DIR, help=_DIR_HELP),
                 backend: str = typer.Option(registry.DEFAULT, help=_BACKEND_HELP)) -> None:
    """Stop the cluster started by `cluster up`. Only processes whose command line shows they are this
    cluster's brokers are signalled; a stale pid in the state file is left alone."""
    _on_crash("cluster down", None)
    c = _attach(_backend(backend), dir)
    if c is None:
        raise typer.Exit(0)
    stale = c.down(graceful=True)
    for i, pid in stale:
        console.print(f"[yellow]broker {i}: pid {pid} is not this cluster's broker (stale state): left alone[/]")
    console.print("cluster stopped")


if __name__ == "__main__":
    sys.exit(main())
