"""Reading a run directory into frames for the report: :class:`Run` and :func:`load_run`.

Every file is optional and read with its reader in :mod:`onceproof.store.readers`; a missing or unreadable file
is recorded on the :class:`Run` and the report still draws every section it can.

Time origin ``t0`` (epoch s): ``wall - time/1e9`` of the history (the same origin as the nemesis
history), falling back to the nemesis history, then ``test.json`` ``started``, then the earliest input
timestamp. Every plot's x is seconds since ``t0``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from onceproof.store import readers
from onceproof.store.runfiles import HISTORY, INPUT, LIVE, NEMESIS, OUTPUT, RECOVERY, RESULTS, SINK, TEST, stored


@dataclass
class Run:
    """Everything read from one run directory. A frame or dict is ``None`` when its file is absent or
    unreadable; ``missing`` names absent files, ``problems`` unreadable ones (with the error)."""

    run_dir: Path
    test: dict | None = None
    results: dict | None = None
    recovery: dict | None = None
    history: pd.DataFrame | None = None  # columns: type, f, wall (epoch s), time (ns), key, seq, ...
    nemesis: pd.DataFrame | None = None  # columns: type, f, wall, time, outcome, target, evidence, ...
    input: pd.DataFrame | None = None  # columns: partition, offset, key, seq, [timestamp ms], [t ms]
    output: pd.DataFrame | None = None  # + in_partition, in_offset, in_ts (ms), op.* provenance
    sink: pd.DataFrame | None = None  # columns: time (epoch s), event, batch, partition, attempt, ...
    live: pd.DataFrame | None = None  # the during-faults reader: partition, offset, key, seq, in_ts, seen_ms
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    t0: float | None = None  # test start, epoch seconds
    t0_source: str = ""

    @property
    def name(self) -> str:
        for d, k in ((self.results, "test"), (self.test, "name")):
            if d and d.get(k):
                return str(d[k])
        return self.run_dir.name

    @property
    def verdict(self) -> str:
        if self.results is None:
            return "crashed"
        return str(self.results.get("verdict") or "crashed")

    @property
    def config(self) -> dict:
        """``test.json``'s ``config`` (``{}`` when absent)."""
        return (self.test or {}).get("config") or {}

    @property
    def not_written(self) -> dict[str, str]:
        """Files this run is not expected to write, each with why; an absent one is not ``missing``. A
        ``--pipeline-cmd`` job writes ``sink.jsonl`` only through the sink library, which it need not use."""
        if self.config.get("pipeline_cmd"):
            return {SINK: "a --pipeline-cmd job writes it only if it uses the sink library"}
        return {}

    @property
    def replay(self) -> str | None:
        for d in (self.results, self.test):
            if d and d.get("replay"):
                return str(d["replay"])
        return None


def load_run(run_dir: Path) -> Run:
    """Read every file of ``run_dir`` that exists and can be parsed (``onceproof.store.readers``); never raises for
    bad data: an absent file is named in ``missing``, an unreadable one in ``problems``."""
    run = Run(Path(run_dir))
    run.test = _load(run, TEST, readers.read_test)
    run.results = _load(run, RESULTS, readers.read_results)
    run.recovery = _load(run, RECOVERY, readers.read_recovery)
    run.history = _load(run, HISTORY, readers.read_history)
    run.nemesis = _load(run, NEMESIS, readers.read_nemesis)
    run.input = _load(run, INPUT, readers.read_input)
    run.output = _load(run, OUTPUT, readers.read_output)
    run.sink = _load(run, SINK, lambda d: pd.DataFrame.from_records(readers.read_sink(d)))
    run.live = _load(run, LIVE, readers.read_live)
    run.t0, run.t0_source = time_origin(run)
    return run


def _load(run: Run, name: str, reader: Callable[[Path], Any]) -> Any:
    if not stored(run.run_dir / name).exists():  # history.jsonl.gz etc. once the run is compacted
        if name not in run.not_written:  # test.json, read first, says what the run writes
            run.missing.append(name)
        return None
    try:
        return reader(run.run_dir)
    except Exception as e:  # noqa: BLE001 - an unreadable file is reported, the rest still renders
        cause = e.__cause__ or e  # the parser's own error: the report names the file already
        run.problems.append(f"{name}: {type(cause).__name__}: {cause}")
        return None


def time_origin(run: Run) -> tuple[float | None, str]:
    """The test's start as epoch seconds and where it came from (see the module docstring); ``(None, why)``
    when nothing dates the run."""
    for name, df in ((HISTORY, run.history), (NEMESIS, run.nemesis)):
        if df is not None and {"wall", "time"} <= set(df.columns):
            d = pd.to_numeric(df["wall"], errors="coerce") - pd.to_numeric(df["time"], errors="coerce") / 1e9
            d = d.dropna()
            if len(d):
                return float(d.median()), f"{name} (wall - time)"
    started = (run.test or {}).get("started")
    if started:
        try:
            return dt.datetime.strptime(started, "%Y-%m-%dT%H:%M:%S%z").timestamp(), f"{TEST} started"
        except ValueError:
            pass
    for col in ("timestamp", "t"):
        if run.input is not None and col in run.input.columns and len(run.input):
            return float(pd.to_numeric(run.input[col]).min()) / 1000.0, f"earliest {INPUT} {col}"
    return None, f"unknown: no history, no {TEST} start, no input timestamps"

