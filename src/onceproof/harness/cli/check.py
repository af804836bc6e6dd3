"""``onceproof check``: a stored run offline, or any pipeline's topics live, checked by an engine
(``checking/engines.py``: pandas in this process, or Spark jobs).

A live check (``--bootstrap``) waits until the pipeline has caught up, reads and checks its topics (or
its file sink's output), and stores what it read as a run directory of its own under
``<results>/check-<output-topic>/<time>/`` (``test.json``, ``results.json``, the parquet snapshots,
``report.html``, ``junit.xml``), so ``report``, ``index`` and ``check RUN_DIR`` work on it.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from pathlib import Path

import typer
from rich.console import Console

from onceproof.checking import checks as checking
from onceproof.checking import engines, recovery
from onceproof.harness.cli.app import EXIT, EXIT_CRASHED, console, finite, on_crash, one_line, require_run_dir, usage
from onceproof.harness.summary import summarize
from onceproof.report.html import build_report
from onceproof.report.index import build_index
from onceproof.report.junit import write_junit
from onceproof.store.runfiles import RESULTS, TEST, RunFiles
from onceproof.store.runs import DEFAULT_ROOT, RunDir
from onceproof.workloads import registry as workloads


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
    on_crash("check", None)
    eng, opts = _engine(engine, spark_master, spark_conf, bootstrap if run_dir is not None else "",
                        input_topic, output_topic)
    if (run_dir is None) == (not bootstrap) and not (run_dir is not None and eng.reads_topics_for_run_dir):
        raise usage("give either RUN_DIR or --bootstrap HOST:PORT (not both)")
    if run_dir is not None:
        if group or settle or workload != "keyed" or file_sink:
            raise usage("only with --bootstrap (a stored run is checked as it was saved)",
                        "--group" if group else "--settle" if settle else "--workload" if workload != "keyed"
                        else "--file-sink")
        rd = require_run_dir(run_dir)
        why = eng.refusal(rd, workload=workload, file_sink=file_sink, file_read=file_read)
        if why:
            raise usage(why, "--engine")
        on_crash("check", RunFiles(rd).error_log("check"))
        result = eng.check_saved(rd, file_read=file_read if file_read != "committed" else None, options=opts)
        result["run_dir"] = str(rd)
    else:
        if workload not in workloads.names():
            raise usage(f"unknown workload {workload!r}; choose one of {', '.join(workloads.names())}", "--workload")
        if file_read not in ("committed", "listing"):
            raise usage(f"unknown file reader {file_read!r}; choose committed or listing", "--file-read")
        if file_sink is not None and not (file_sink / "_spark_metadata").is_dir():
            raise usage(f"{file_sink} has no _spark_metadata: give the directory the file sink writes to "
                        "(writeStream...option('path', ...))", "--file-sink")
        why = eng.refusal(None, workload=workload, file_sink=file_sink, file_read=file_read)
        if why:
            raise usage(why, "--engine")
        result = _check_live(bootstrap, input_topic, output_topic, group, settle, recovery_timeout, results,
                             quiet=json_out, workload=workload, file_sink=file_sink, file_read=file_read,
                             engine=eng, options=opts)
    if json_out:
        print(json.dumps(result, indent=2, default=str))
    else:
        summarize(result, console)
        for w in result.get("warnings", []):
            console.print(f"[yellow]warning: {w}[/]", soft_wrap=True)
    raise typer.Exit(EXIT.get(result["verdict"], EXIT_CRASHED))


def _engine(name: str, spark_master: str, spark_conf: list[str], bootstrap: str, input_topic: str,
            output_topic: str) -> tuple[engines.Engine, engines.Options]:
    """The ``--engine`` and its options (``checking/engines.py``). Raises a usage error (254) for an unknown
    engine, a ``--spark-*`` option without ``--engine spark`` or a ``--spark-conf`` that is not KEY=VALUE."""
    try:
        eng = engines.get(name)
    except ValueError as e:
        raise usage(str(e), "--engine") from None
    if name != "spark" and (spark_master != engines.Options.spark_master or spark_conf):
        raise usage("only with --engine spark",
                    "--spark-master" if spark_master != engines.Options.spark_master else "--spark-conf")
    conf = {}
    for kv in spark_conf:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise usage(f"must be KEY=VALUE (e.g. spark.driver.memory=8g), got {kv!r}", "--spark-conf")
        conf[k.strip()] = v
    return eng, engines.Options(spark_master=spark_master, spark_conf=conf, bootstrap=bootstrap,
                                input_topic=input_topic, output_topic=output_topic)


def _check_live(bootstrap: str, input_topic: str, output_topic: str, group: str, settle: float,
                recovery_timeout: float, results: Path, quiet: bool, workload: str = "keyed",
                file_sink: Path | None = None, file_read: str = "committed", engine: engines.Engine | None = None,
                options: engines.Options | None = None) -> dict:
    """``check --bootstrap``: wait until caught up, read, check (with ``engine``, default pandas), and store
    a run directory (``results.json``, ``report.html``, ``junit.xml``, the parquet snapshots)."""
    finite(recovery_timeout, "--recovery-timeout")
    finite(settle, "--settle", lo_open=False)
    if settle and settle >= recovery_timeout:
        raise usage(f"must be shorter than --recovery-timeout ({recovery_timeout:g}s), got {settle:g}", "--settle")
    if results.exists() and not results.is_dir():
        raise usage(f"{results} is not a directory", "--results")
    out = Console(stderr=True, width=console.width) if quiet else console
    clients = logging.getLogger("onceproof.librdkafka")  # librdkafka's own chatter: a file, not the console
    clients.propagate = False
    clients.addHandler(logging.NullHandler())
    checking.probe(bootstrap, input_topic, output_topic)
    rd = RunDir(results, f"check-{output_topic}")
    on_crash("check", rd.error_log("check"))
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
                                    "recovery_timeout": recovery_timeout, "nemesis": [], "workload": workload,
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
    _write_reports(rd, results, out)
    return result


def _write_reports(rd: RunDir, results: Path, out: Console) -> None:
    """A live check's ``junit.xml`` and ``report.html``, and the results root's ``index.html``; a failure
    is a warning on ``out`` (the verdict stands without its report)."""
    try:
        write_junit(rd.path)
        build_report(rd.path)
        build_index(results)
        out.print(f"report: {rd.report}", soft_wrap=True)
    except Exception as e:  # noqa: BLE001 - the verdict stands without its report
        out.print(f"[yellow]report failed: {one_line(e)} (rebuild with `onceproof report {rd.path}`)[/]",
                  soft_wrap=True)


def _engine_argv(engine: engines.Engine | None, options: engines.Options | None) -> list[str]:
    """The ``--engine`` options of a replay command (none for the default engine)."""
    if engine is None or engine.name == "pandas":
        return []
    return (["--engine", engine.name, "--spark-master", options.spark_master]
            + [a for k, v in options.spark_conf.items() for a in ("--spark-conf", f"{k}={v}")])
