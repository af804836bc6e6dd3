"""The layout of one run directory (DESIGN §5): the one place that names its files.

``results/<test>/<stamp>/`` holds (any of them may be missing: a run that crashed during setup has
only ``test.json`` and ``results.json``; see ``docs/results-schema.md``)::

    test.json                    config, seed, versions, schedule, replay command
    history.jsonl                workload ops, appended as the run goes (history.jsonl.gz once the run
                                 reached a verdict: store/compact.py; logs/ likewise)
    nemesis.jsonl                fault and heal ops, same clock as the history
    sink.jsonl                   the eos sink's transaction events (written by the pipeline's tasks)
    recovery.json                offsets per partition when recovery ended
    input.parquet, output.parquet, output_uncommitted.parquet, live.parquet
                                 the topics as read for the check (re-checkable offline)
    results.json                 the verdict and everything the check found
    report.html, junit.xml       built from the files above
    logs/                        harness, clients, brokers, drivers, executors/
    control/, checkpoint/, cluster/
                                 the pipeline's fault hooks, Spark checkpoint, broker configs and data

Standard library only: the CLI imports it at start-up and the harness passes these paths to the
pipeline's processes (``--sink-log``, ``--checkpoint``, ``--control-dir``), which never import it.
Reading the files is :mod:`onceproof.store.readers`; creating and listing run directories is
:mod:`onceproof.store.runs`.
"""

from __future__ import annotations

from pathlib import Path

TEST = "test.json"
HISTORY = "history.jsonl"
NEMESIS = "nemesis.jsonl"
SINK = "sink.jsonl"
RECOVERY = "recovery.json"
RESULTS = "results.json"
INPUT = "input.parquet"
OUTPUT = "output.parquet"
OUTPUT_UNCOMMITTED = "output_uncommitted.parquet"
LIVE = "live.parquet"
LSO = "lso.parquet"
REPORT = "report.html"
JUNIT = "junit.xml"
LOGS = "logs"
EXECUTOR_LOGS = "executors"  # under LOGS
CONTROL = "control"
CHECKPOINT = "checkpoint"
CLUSTER = "cluster"
GZ = ".gz"  # suffix of a file compressed after the run (store/compact.py)

#: The data files of a run with what each holds, in the order the report's "files" section lists them.
CONTENTS: dict[str, str] = {
    TEST: "config, versions, fault schedule, replay command",
    RESULTS: "verdict, anomaly counts and examples, faults, timings",
    HISTORY: "workload ops (send invoke / ok / fail / info)",
    NEMESIS: "fault ops with target, outcome and evidence",
    INPUT: "the input topic as checked",
    OUTPUT: "the output topic as checked",
    SINK: "eos sink begin / commit / skip / abort events (eos sink only)",
    RECOVERY: "end offsets, consumed offsets, output LSO / high watermark after recovery",
}

#: Files of which at least one is in every run directory (a run that crashed at once has test.json).
MARKERS = (TEST, RESULTS, HISTORY, HISTORY + GZ, INPUT, OUTPUT)


def stored(path: Path) -> Path:
    """``path`` as stored: itself, or ``path.gz`` when only that exists (a finished run's history and large
    logs are compressed, :mod:`onceproof.store.compact`); ``path`` when neither exists. One ``stat``, nothing read."""
    if path.exists():
        return path
    gz = path.with_name(path.name + GZ)
    return gz if gz.exists() else path


class RunFiles:
    """The paths of one run directory's files. Pure naming: nothing is created, read or checked."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    @property
    def test(self) -> Path:
        return self.path / TEST

    @property
    def history(self) -> Path:
        return self.path / HISTORY

    @property
    def nemesis(self) -> Path:
        return self.path / NEMESIS

    @property
    def sink(self) -> Path:
        return self.path / SINK

    @property
    def recovery(self) -> Path:
        return self.path / RECOVERY

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def input(self) -> Path:
        return self.path / INPUT

    @property
    def output(self) -> Path:
        return self.path / OUTPUT

    @property
    def output_uncommitted(self) -> Path:
        return self.path / OUTPUT_UNCOMMITTED

    @property
    def live(self) -> Path:
        return self.path / LIVE

    @property
    def lso(self) -> Path:
        return self.path / LSO

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def junit(self) -> Path:
        return self.path / JUNIT

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    @property
    def executor_logs(self) -> Path:
        return self.path / LOGS / EXECUTOR_LOGS

    @property
    def harness_log(self) -> Path:
        """Every harness log record of the run, tracebacks included."""
        return self.logs / "harness.log"

    @property
    def clients_log(self) -> Path:
        """librdkafka's own messages (connection refused while a broker is down, ...)."""
        return self.logs / "clients.log"

    def error_log(self, command: str) -> Path:
        """Where the traceback of a crashed ``onceproof <command>`` goes: ``logs/<command>-error.log``."""
        return self.logs / f"{command}-error.log"

    @property
    def control(self) -> Path:
        return self.path / CONTROL

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def cluster(self) -> Path:
        return self.path / CLUSTER
