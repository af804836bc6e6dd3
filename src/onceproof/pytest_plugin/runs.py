"""One ``onceproof run`` from a test, without pytest: the config from keyword arguments, the run, its result,
the judgement of its verdict and its JUnit properties. :mod:`onceproof.pytest_plugin.plugin` wires these into
fixtures; the tests drive them with a stand-in :func:`execute` (no cluster).

Config keys are :class:`onceproof.harness.config.TestConfig` fields (``sink``, ``nemesis``, ``time_limit``, ``seed``,
``backend``, ...). :func:`config_from_kwargs` turns them into the ``onceproof run`` command line and parses
and validates it with the CLI's own parser and :meth:`TestConfig.validate`, so a value the CLI refuses is
refused here with the same reason. Plus one key of the plugin's own, ``expect``: the verdict(s) the test
wants (default ``valid``).

Lazy imports: the plugin imports this module in every pytest session of an environment where onceproof is
installed, so the harness modules that pull pandas, pyarrow or the Kafka client (``harness.config``,
``harness.cli``, ``harness.runner``, ``store.readers``, ``report.junit``) and ``rich`` are imported inside
the functions that use them, when a test asks for a run. Each such import says ``# lazy: see module doc``.
"""

from __future__ import annotations

import difflib
import os
import signal
import threading
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from onceproof.backends import registry
from onceproof.harness import signals
from onceproof.store.runfiles import RESULTS, RunFiles

if TYPE_CHECKING:  # lazy: see module doc
    from onceproof.harness.config import TestConfig

VERDICTS = ("valid", "invalid", "unknown", "crashed")  # results.json "verdict" (docs/results-schema.md)
EXPECT = "expect"  # the plugin's own key: the verdict(s) a test wants
PROPERTY = "onceproof."  # prefix of the JUnit <property> names


class OnceproofConfigError(ValueError):
    """A key or value given to ``onceproof_run``, the ``onceproof`` marker or an indirect parameter that
    cannot work. The message names the key, the value, where it was given, why, and what to do instead;
    ``key`` is the key (a ``TestConfig`` field or ``expect``; ``None`` when no one key is at fault)."""

    def __init__(self, key: str | None, message: str):
        super().__init__(message)
        self.key = key


class Setting(NamedTuple):
    """A config value and where the test gave it (``onceproof_run()``, ``@pytest.mark.onceproof on
    test_x``, ``--onceproof-backend``, ...), for error messages."""

    value: Any
    source: str


# ------------------------------------------------------------------------------------------- config


def config_keys() -> list[str]:
    """The config keys: every ``TestConfig`` field name, in the CLI's order."""
    from onceproof.harness.config import TestConfig  # lazy: see module doc

    return [f.name for f in TestConfig.options()]


def _error(key: str | None, given: dict[str, Setting], message: str, fix: str | None = None) -> OnceproofConfigError:
    from onceproof.harness.config import TestConfig  # lazy: see module doc

    if key is None:
        what = "the onceproof config"
    elif key in given:
        what = f"{key}={given[key].value!r} (from {given[key].source})"
    else:
        what = f"{key} (left at its default)"
    if fix is None and key is not None and key in config_keys():
        flag = next(TestConfig.flag(f) for f in TestConfig.options() if f.name == key)
        fix = (f"give {key} a value that `onceproof run {flag}` accepts (`onceproof run --help` gives each "
               "option's meaning and bounds)")
    return OnceproofConfigError(key, f"{what}: {message.rstrip('.')}" + (f"; {fix}" if fix else ""))


def _option_words(key: str, s: Setting, given: dict[str, Setting]) -> list[str]:
    """The ``onceproof run`` words that set ``key`` to ``s.value``.

    Raises: :class:`OnceproofConfigError` when the value's Python type cannot be that option's (``None``,
    a bool for a number, a list for a number, ...); the CLI's parser judges the rest.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not these
    from onceproof.harness.config import TestConfig  # lazy: see module doc

    f = next(f for f in TestConfig.options() if f.name == key)
    flag, typ, v = TestConfig.flag(f), typing.get_type_hints(TestConfig)[key], s.value
    if v is None:
        raise _error(key, given, "None is not a value", f"leave {key} out to get its default")
    if typ is bool:
        if not isinstance(v, bool):
            raise _error(key, given, f"must be True or False, got a {type(v).__name__}")
        return [flag if v else "--no-" + flag[2:]]
    if isinstance(v, bool):
        raise _error(key, given, f"must be a {getattr(typ, '__name__', typ)}, got a bool")
    # "--flag=text": a text starting with "-" (seed=-1, test_name="-x") stays the option's value
    if isinstance(v, (list, tuple)) and f.metadata.get("fmt") and all(isinstance(x, str) for x in v):
        return [f"{flag}={f.metadata['fmt'](list(v))}"]
    if isinstance(v, (str, int, float, Path)):
        return [f"{flag}={v}"]
    raise _error(key, given, f"a {type(v).__name__} cannot be an option's value",
                 "give a str or a number" + (", or a list of str," if f.metadata.get("fmt") else "")
                 + " as on the command line")


def config_from_kwargs(given: dict[str, Setting]) -> TestConfig:
    """A validated ``TestConfig`` from ``{key: Setting}`` (keys: ``TestConfig`` fields; absent keys take
    their defaults), judged exactly as ``onceproof run`` judges its options: the values become the
    command line, ``onceproof.harness.cli.parse_run_args`` parses it and ``TestConfig.validate`` checks it (bounds,
    sink, faults the backend can perform, a fault plan that fits the time limit).

    Raises: :class:`OnceproofConfigError` for the first bad key (an unknown key, with the nearest known
    one) or value, naming where it was given and the fix.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not these
    from onceproof.harness.cli import UsageError, parse_run_args  # lazy: see module doc
    from onceproof.harness.config import ConfigError, TestConfig  # lazy: see module doc

    keys = config_keys()
    for key in given:
        if key not in keys:
            near = difflib.get_close_matches(key, [*keys, EXPECT], n=1)
            raise _error(key, given, "not a config key" + (f" (did you mean {near[0]}?)" if near else ""),
                         f"the keys are TestConfig's fields ({', '.join(keys)}) and {EXPECT}")
    argv = [w for key, s in given.items() for w in _option_words(key, s, given)]
    by_flag = {TestConfig.flag(f): f.name for f in TestConfig.options()}
    try:
        return parse_run_args(argv).validate()
    except ConfigError as e:
        raise _error(by_flag.get(e.option), given, e.message) from None
    except UsageError as e:  # the parser's "Invalid value for '--keys': 'x' is not a valid integer"
        param = getattr(e, "param", None)
        raise _error(getattr(param, "name", None), given, e.format_message()) from None


def parse_expect(s: Setting) -> frozenset[str]:
    """The verdicts a test accepts: ``expect`` as one verdict (``"invalid"``) or several
    (``("invalid", "unknown")``).

    Raises: :class:`OnceproofConfigError` naming the verdicts when one is not a verdict or none is given.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not these
    v = s.value
    wanted = [v] if isinstance(v, str) else list(v) if isinstance(v, Iterable) else [v]
    bad = [w for w in wanted if w not in VERDICTS]
    if bad or not wanted:
        raise _error(EXPECT, {EXPECT: s}, f"{'not a verdict: ' + ', '.join(map(repr, bad)) if bad else 'empty'}",
                     f"expect one of {', '.join(VERDICTS)}, or a tuple of them")
    return frozenset(wanted)


# ------------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class RunResult:
    """What one run gave, read back from its directory.

    ``verdict``: ``valid`` / ``invalid`` / ``unknown`` / ``crashed``; ``exit_code``: the CLI's (0, 1, 2,
    255); ``counts``: ``{anomaly: n}`` as in ``results.json`` (every anomaly the checker counted, zeros
    included, e.g. ``duplicate``, ``duplicate-records``, ``lost``); ``coverage``: ``results.json``'s rows
    ``{fault, target, planned, invoked, effective, exercised, other}`` (turns); ``run_dir``: the run's
    directory; ``report``: its ``report.html``, ``None`` when the report could not be built;
    ``results``: all of ``results.json`` (``docs/results-schema.md``).
    """

    verdict: str
    exit_code: int
    counts: dict[str, int]
    coverage: list[dict]
    run_dir: Path
    report: Path | None
    results: dict = field(repr=False, default_factory=dict)

    @property
    def anomalies(self) -> dict[str, int]:
        """The non-zero counts."""
        return {k: v for k, v in self.counts.items() if v}

    @property
    def test(self) -> str:
        """The run's test name (``<sink>-<faults>`` or ``test_name``)."""
        return str(self.results.get("test") or self.run_dir.parent.name)

    @property
    def replay(self) -> str:
        """The command line that replays the run."""
        return str(self.results.get("replay") or "")

    @classmethod
    def read(cls, exit_code: int, run_dir: Path) -> RunResult:
        """The result of the run in ``run_dir`` that exited with ``exit_code``. A missing or damaged
        ``results.json`` reads as verdict ``crashed`` with an ``error`` saying so."""
        from onceproof.store import readers  # lazy: see module doc

        run_dir = Path(run_dir)
        r = readers.read_or_none(readers.read_results, run_dir)
        if r is None:
            r = {"verdict": "crashed", "error": f"{run_dir / RESULTS} is missing or unreadable"}
        report = RunFiles(run_dir).report
        return cls(verdict=str(r.get("verdict") or "crashed"), exit_code=int(exit_code),
                   counts=dict(r.get("counts") or {}), coverage=list(r.get("coverage") or []), run_dir=run_dir,
                   report=report if report.exists() else None, results=r)


def describe_anomalies(result: RunResult) -> str:
    """The non-zero anomaly counts as words: ``"3 duplicate (5 duplicate-records), 209 lost"``; ``""``
    when there are none. A ``<a>-records`` count goes with ``<a>`` (``onceproof.report.junit.anomaly_cases``)."""
    from onceproof.report.junit import anomaly_cases  # lazy: see module doc

    out = []
    for name, n, details in anomaly_cases(result.results):
        if n:
            extra = ", ".join(f"{v} {k}" for k, v in details.items() if v)
            out.append(f"{n} {name}" + (f" ({extra})" if extra else ""))
    return ", ".join(out)


def _coverage_words(result: RunResult) -> str:
    return ", ".join(f"{c.get('fault')}:{c.get('target')} exercised {c.get('exercised', 0)} of "
                     f"{c.get('planned', 0)} planned" for c in result.coverage)


def judge(result: RunResult, expect: frozenset[str]) -> str | None:
    """``None`` when ``result.verdict`` is one of ``expect``; else why the test fails, as one paragraph:
    the verdict and the one expected, the anomalies found (or that none was), why the run is unknown or
    crashed, the report (or how to rebuild it), then the replay command."""
    if result.verdict in expect:
        return None
    want = " or ".join(v for v in VERDICTS if v in expect)
    found = describe_anomalies(result)
    text = f"onceproof run {result.test} was {result.verdict.upper()}, expected {want}: "
    if result.verdict == "crashed":
        text += (f"the run ended before its check: {result.results.get('error') or 'no error recorded'} (the "
                 f"traceback is in the test's captured log and under {result.run_dir / 'logs'})")
    else:
        text += f"anomalies {found}" if found else "no anomaly was found"
    reasons = list(result.results.get("unknown_reasons") or [])
    if reasons:
        text += f"; unknown because {'; '.join(reasons)}"
    if result.verdict == "valid" and result.coverage:
        text += f"; coverage: {_coverage_words(result)}"
    text += (f". Report: {result.report}." if result.report else
             f". No report.html (rebuild it with `onceproof report {result.run_dir}`).")
    if result.replay:  # last: CI shows the first 500 characters (pytest's JUnit message attribute)
        text += f" Replay: {result.replay}"
    return " ".join(text.split())


def junit_properties(result: RunResult, expect: frozenset[str]) -> list[tuple[str, str]]:
    """The test case's JUnit ``<property>`` pairs for one run: ``onceproof.test``, ``.verdict``,
    ``.expected`` (comma-separated), ``.exit_code``, ``.anomalies`` (``name=n, ...`` of the non-zero
    counts, or ``none``), ``.count.<anomaly>`` for every count, ``.report`` (``""`` when none),
    ``.run_dir``, ``.replay``."""
    p = PROPERTY
    props = [(p + "test", result.test), (p + "verdict", result.verdict),
             (p + "expected", ",".join(v for v in VERDICTS if v in expect)), (p + "exit_code", str(result.exit_code)),
             (p + "anomalies", ", ".join(f"{k}={v}" for k, v in result.anomalies.items()) or "none")]
    props += [(f"{p}count.{k}", str(v)) for k, v in result.counts.items()]
    props += [(p + "report", str(result.report or "")), (p + "run_dir", str(result.run_dir)),
              (p + "replay", result.replay)]
    return props


# ------------------------------------------------------------------------------------------- running


class Interrupts:
    """While entered in the main thread: SIGINT and SIGTERM raise ``onceproof.harness.signals.Interrupted`` (as in
    ``onceproof run``: a CI runner's SIGTERM, or a SIGINT a background job inherited as ignored, still
    tears the cluster down) and the raised exception is kept in ``received``. On exit the previous
    handlers are back. In another thread it does nothing (Python handles signals in the main thread)."""

    def __init__(self) -> None:
        self.received: list[KeyboardInterrupt] = []
        self._prev: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._prev = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        signals.install()
        raise_interrupted = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            try:
                raise_interrupted(signum, frame)
            except KeyboardInterrupt as e:
                self.received.append(e)
                raise

        for s in self._prev:
            signal.signal(s, handler)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._prev.items():
            if h is not None:  # None: a handler not set from Python, which cannot be put back
                signal.signal(s, h)


def backend_of(given: dict[str, Setting]) -> str:
    """The backend a run of ``given`` settings runs on: its ``backend`` key, else the harness's default."""
    return str(given["backend"].value) if "backend" in given else registry.DEFAULT


def start_warm(backend: str, data_dir: Path):
    """Start the warm cluster ``onceproof_run``'s runs lease (``onceproof.harness.warm.start``: 3 brokers of
    the pinned release behind toxiproxy, each in a cgroup of its own, so that runs with network faults and
    isolations lease it too) in ``data_dir``; returns its ``warm.Owned`` (``.data_dir``, ``.stop()``). The
    plugin's unit tests replace this function with a stand-in.

    Raises: ``ClusterError`` or toxiproxy's start errors (what was started is stopped again)."""
    from onceproof.harness import warm  # lazy: see module doc

    return warm.start(registry.get(backend), data_dir, proxied=True, own_groups=True)


class WarmLease:
    """The session's warm cluster (``--onceproof-warm-cluster``), started by the first run that leases it
    (:meth:`data_dir`) through :func:`start_warm` on ``backend`` in the directory ``make_dir()`` gives, and
    stopped by :meth:`stop`. A start that fails raises to that run and is tried again by the next."""

    def __init__(self, backend: str, make_dir: typing.Callable[[], Path]):
        self.backend = backend
        self._make_dir = make_dir
        self._owned = None

    def data_dir(self) -> Path:
        """The warm cluster's directory (``run --warm-cluster DIR``), starting it on the first call; SIGINT
        and SIGTERM during the start end it through its cleanup and are raised as ``KeyboardInterrupt``.
        Raises: as :func:`start_warm`."""
        if self._owned is None:
            with Interrupts():
                self._owned = start_warm(self.backend, self._make_dir())
        return self._owned.data_dir

    def stop(self) -> None:
        """Stop the cluster when one was started (brokers, proxies, reaper); idempotent."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.stop()


def execute(cfg: TestConfig, console) -> tuple[int, Path]:
    """Run ``cfg`` (``onceproof.harness.runner.run``): the one call here that starts a cluster. Returns ``(exit
    code, run directory)``. The plugin's unit tests replace this function with a stand-in."""
    from onceproof.harness.runner import run  # lazy: see module doc

    return run(cfg, console)


def run_one(cfg: TestConfig, console=None) -> tuple[RunResult, KeyboardInterrupt | None]:
    """Run ``cfg`` through :func:`execute` and read its result. SIGINT and SIGTERM during the run end it
    through its teardown (verdict ``crashed``) and come back as the second item, for the caller to raise
    once it has recorded the result. ``ONCEPROOF_RUN`` (set by the runner for the run's processes) is
    put back as it was. ``console``: a ``rich`` console (default: stdout, 120 columns, as the CLI)."""
    if console is None:
        from rich.console import Console  # lazy: see module doc

        console = Console(width=120)
    before = os.environ.get("ONCEPROOF_RUN")
    try:
        with Interrupts() as sig:
            code, run_dir = execute(cfg, console)
    finally:
        if before is None:
            os.environ.pop("ONCEPROOF_RUN", None)
        else:
            os.environ["ONCEPROOF_RUN"] = before
    return RunResult.read(code, run_dir), (sig.received[0] if sig.received else None)
