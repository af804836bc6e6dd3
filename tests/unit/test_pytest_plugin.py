"""The pytest plugin (``pytest_onceproof/``) through pytest's own ``pytester``: inner pytest sessions load it
from its ``pytest11`` entry point as a user's CI would.

Pure logic of the plugin, no cluster: the function it calls to run a test (``onceproof.pytest_plugin.runs.execute``)
is replaced by a stand-in that writes a synthetic run directory (``results.json`` with a verdict and counts
the test chooses), and ``onceproof_cluster`` builds a stand-in backend's cluster (``tests/stand_in_backend.py``:
a table, no process). These tests say nothing about Kafka or Spark. The one real run is
:func:`test_a_real_mutant_run_killed_in_its_commit_window_passes_a_test_that_expects_invalid`
(marked ``cluster``).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from onceproof.backends import registry
from onceproof.backends.base import ClusterError
from onceproof.harness.cli import EXIT
from onceproof.pytest_plugin import runs
from onceproof.store.runfiles import RESULTS, TEST
from onceproof.store.runs import RunDir
from tests.conftest import REPO
from tests.stand_in_backend import StandInBackend, StandInCluster

pytest_plugins = ["pytester"]


def _entry_point() -> importlib.metadata.EntryPoint | None:
    return next((e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "onceproof"), None)


def plugin_args() -> list[str]:
    """Load the plugin by its module when this environment predates its entry point (installed before it
    was added); the entry point itself is checked by ``test_the_plugin_is_installed_as_a_pytest11_entry_point``."""
    return [] if _entry_point() else ["-p", "onceproof.pytest_plugin.plugin"]


# ------------------------------------------------------------------------------------------ stand-ins

COVERAGE = [{"fault": "kill-executor", "target": "", "planned": 2, "invoked": 2, "effective": 2, "exercised": 1,
             "other": {}}]
VALID = {"verdict": "valid", "counts": {"duplicate": 0, "duplicate-records": 0, "lost": 0}, "coverage": COVERAGE}
INVALID = {"verdict": "invalid", "counts": {"duplicate": 3, "duplicate-records": 5, "lost": 2},
           "anomalies": {"duplicate": [{"key": "k1", "seq": 4, "copies": []}], "lost": []}, "coverage": COVERAGE}
UNKNOWN = {"verdict": "unknown", "counts": {"duplicate": 0, "lost": 0}, "coverage": COVERAGE,
           "unknown_reasons": ["fault-not-exercised: kill-broker:leader"]}
CRASHED = {"verdict": "crashed", "error": "RuntimeError('the Spark query did not start in 240s')"}


class StandInRuns:
    """Replaces ``runs.execute``: records the config it was given and writes a synthetic run directory under
    ``cfg.results_root`` (``test.json``, ``results.json`` = :attr:`outcome` with the run's name, seed and
    replay command, and ``report.html`` when :attr:`report`), returning the exit code of its verdict.
    :attr:`during` runs inside the stand-in run (e.g. to signal the process)."""

    def __init__(self) -> None:
        self.configs: list = []
        self.outcome: dict = VALID
        self.report = True
        self.during = None

    def __call__(self, cfg, console) -> tuple[int, Path]:
        self.configs.append(cfg)
        rd = RunDir(Path(cfg.results_root), cfg.name)
        os.environ["ONCEPROOF_RUN"] = str(rd.path)  # as the runner does, for the processes it starts
        rd.write_json(TEST, {"name": cfg.name, "config": {"nemesis": cfg.nemesis}})
        outcome = dict(self.outcome)
        if self.during is not None:
            try:
                self.during()
            except KeyboardInterrupt as e:  # as the runner does: teardown, verdict crashed, no raise
                outcome = {"verdict": "crashed", "error": str(e)}
        rd.write_json(RESULTS, {"test": cfg.name, "run_dir": str(rd.path), "seed": cfg.seed,
                                "replay": cfg.replay_command(), **outcome})
        if self.report:
            rd.report.write_text("<html>stand-in report</html>")
        console.print(f"stand-in run {cfg.name}: {outcome['verdict']}")
        return EXIT[outcome["verdict"]], rd.path


@pytest.fixture
def stand_in(monkeypatch) -> StandInRuns:
    fake = StandInRuns()
    monkeypatch.setattr(runs, "execute", fake)
    return fake


class FailingStandInCluster(StandInCluster):
    """A stand-in cluster whose brokers never start."""

    __slots__ = ()

    def up(self, timeout_s: float = 120.0) -> None:
        super().up(timeout_s)
        raise ClusterError("stand-in: the brokers did not start")


class RecordingBackend(StandInBackend):
    """The stand-in backend, keeping every cluster it built (their ``calls``: up, down, clean); with
    :attr:`fail_up`, clusters that fail to start."""

    def __init__(self) -> None:
        super().__init__()
        self.clusters: list[StandInCluster] = []
        self.fail_up = False

    def cluster(self, shape) -> StandInCluster:
        self.built.append("cluster")
        c = (FailingStandInCluster if self.fail_up else StandInCluster)(shape.nodes, shape.data_dir)
        self.clusters.append(c)
        return c


@pytest.fixture
def backend(monkeypatch) -> RecordingBackend:
    """Registers ``stand-in`` (``--backend stand-in``) as a :class:`RecordingBackend`."""
    b = RecordingBackend()
    monkeypatch.setitem(registry.BACKENDS, "stand-in", "tests.stand_in_backend:StandInBackend")
    monkeypatch.setattr(registry, "_made", {"stand-in": b})
    return b


@contextmanager
def sigterm_guard():
    """While inside, SIGTERM raises an error in this process instead of ending it: a signal test whose
    plugin did not route SIGTERM fails, and does not kill the test session. The handler before is put back."""
    def outer(signum, frame):
        raise RuntimeError("SIGTERM reached the outer handler: the plugin did not install its own")

    prev = signal.signal(signal.SIGTERM, outer)
    try:
        yield outer
    finally:
        signal.signal(signal.SIGTERM, prev)


def junit_cases(path: Path) -> dict[str, ET.Element]:
    """``{test name: <testcase>}`` of a JUnit XML file."""
    return {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}


def properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in case.iter("property")}


# ------------------------------------------------------------------------------------------ registration


def test_the_plugin_is_installed_as_a_pytest11_entry_point():
    ep = _entry_point()
    assert ep is not None, ("no pytest11 entry point 'onceproof' in this environment: reinstall onceproof "
                            "(`pip install -e .`, or `make setup` after pyproject.toml changed)")
    assert ep.value == "onceproof.pytest_plugin.plugin"
    assert ep.load().__name__ == "onceproof.pytest_plugin.plugin"


def test_loading_the_plugin_leaves_the_heavy_harness_imports_to_a_run():
    """Pytest loads the plugin in every session of an environment with onceproof installed: loading it
    imports neither the harness's config and runner nor pandas, pyarrow, the Kafka client or pyspark."""
    heavy = ("pandas", "pyarrow", "confluent_kafka", "pyspark", "onceproof.harness.config", "onceproof.harness.runner",
             "onceproof.harness.cli")
    code = (f"import sys, onceproof.pytest_plugin.plugin; print(sorted(m for m in sys.modules if m in {heavy!r}))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout


def test_fixtures_marker_and_options_are_listed_and_go_with_the_plugin(pytester):
    fixtures = pytester.runpytest("--fixtures", *plugin_args()).stdout.str()
    for name in ("onceproof_cluster", "onceproof_run", "onceproof_results_dir"):
        assert name in fixtures, fixtures
    assert "OnceproofConfigError" in fixtures and "RunResult" in fixtures, "the fixtures' docstrings are missing"
    markers = pytester.runpytest("--markers", *plugin_args()).stdout.str()
    assert "@pytest.mark.onceproof(**config, expect='valid')" in markers, markers
    helptext = pytester.runpytest("--help", *plugin_args()).stdout.str()
    for opt in ("--onceproof-backend", "--onceproof-results", "--onceproof-cluster-scope"):
        assert opt in helptext, helptext
    if _entry_point():  # off by its entry point's name, as users turn it off
        off = pytester.runpytest("--fixtures", "-p", "no:onceproof").stdout.str()
        assert "onceproof_run" not in off, off


def test_an_unknown_backend_option_is_a_usage_error_naming_the_backends(pytester):
    res = pytester.runpytest("--onceproof-backend", "nope", *plugin_args())
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--onceproof-backend: unknown backend 'nope'; choose one of local*"])


# ------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize("where,code,expected", [
    ("call", "onceproof_run(time_limt=60)",
     "time_limt=60 (from onceproof_run()): not a config key (did you mean time_limit?)*"),
    ("marker", "@pytest.mark.onceproof(sinc='eos')",
     "sinc='eos' (from @pytest.mark.onceproof on test_it): not a config key (did you mean sink?)*"),
    ("call", "onceproof_run(time_limit=0)",
     "time_limit=0 (from onceproof_run()): must be > 0, got 0; give time_limit a value that "
     "`onceproof run --time-limit` accepts*"),
    ("call", "onceproof_run(seed=-1)", "seed=-1 (from onceproof_run()): must be ≥ 0, got -1*"),
    ("call", "onceproof_run(keys='many')", "keys='many' (from onceproof_run()): Invalid value for '--keys'*"),
    ("call", "onceproof_run(nemesis='kill-everything')",
     "nemesis='kill-everything' (from onceproof_run()): unknown nemesis kill-everything; choose from: *"),
    ("call", "onceproof_run(nemesis='all')", "time_limit (left at its default): * use --time-limit * or more*"),
    ("call", "onceproof_run(keep_data='yes')", "keep_data='yes' (from onceproof_run()): must be True or False*"),
    ("call", "onceproof_run(expect='broken')",
     "expect='broken' (from onceproof_run()): not a verdict: 'broken'; expect one of valid, invalid, unknown, "
     "crashed*"),
])
def test_a_bad_config_key_or_value_raises_a_named_error_and_starts_nothing(pytester, stand_in, where, code,
                                                                           expected):
    if where == "marker":
        src = f"import pytest\n{code}\ndef test_it(onceproof_run):\n    onceproof_run()\n"
    else:
        src = f"def test_it(onceproof_run):\n    {code}\n"
    pytester.makepyfile(test_cfg=src)
    res = pytester.runpytest(*plugin_args())
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([f"E   *OnceproofConfigError: {expected}"])
    res.stdout.fnmatch_lines([">*onceproof_run(*"])  # the traceback ends at the test's own line
    assert stand_in.configs == [], "a run was started for a refused config"


def test_config_comes_from_options_markers_parameters_and_the_call_in_that_order(pytester, stand_in, backend):
    pytester.makepyfile(test_cfg="""
        import pytest
        pytestmark = pytest.mark.onceproof(sink="at-least-once", seed=1, time_limit=20)

        @pytest.mark.onceproof(seed=2, time_limit=30, nemesis="kill-executor")
        class TestRuns:
            @pytest.mark.onceproof(seed=3)
            @pytest.mark.parametrize("onceproof_run", [{"time_limit": 40}], indirect=True)
            def test_layers(self, onceproof_run):
                onceproof_run(test_name="mine")

            def test_class_marker(self, onceproof_run):
                onceproof_run(nemesis=["kill-executor", "kill-driver"], backend="local")

        @pytest.mark.parametrize("onceproof_run", ["local"], indirect=True)
        def test_backend_parameter(onceproof_run):
            onceproof_run()
    """)
    results = pytester.path / "my-results"
    res = pytester.runpytest("--onceproof-backend", "stand-in", "--onceproof-results", str(results), *plugin_args())
    res.assert_outcomes(passed=3)
    layers, klass, param = stand_in.configs
    assert (layers.sink, layers.seed, layers.time_limit, layers.nemesis, layers.test_name, layers.backend) == \
        ("at-least-once", 3, 40.0, ["kill-executor"], "mine", "stand-in")
    assert (klass.seed, klass.time_limit, klass.nemesis, klass.backend) == (2, 30.0, ["kill-executor", "kill-driver"],
                                                                         "local")
    assert (param.seed, param.time_limit, param.nemesis, param.backend) == (1, 20.0, [], "local")
    assert {c.results_root for c in stand_in.configs} == {results.absolute()}


def test_runs_go_under_pytests_basetemp_by_default(pytester, stand_in):
    pytester.makepyfile(test_it="def test_it(onceproof_run):\n    onceproof_run(nemesis='kill-executor')\n")
    basetemp = pytester.path / "bt"
    pytester.runpytest(f"--basetemp={basetemp}", *plugin_args()).assert_outcomes(passed=1)
    (cfg,) = stand_in.configs
    assert cfg.results_root == basetemp / "onceproof-results"
    assert (cfg.results_root / "eos-kill-executor" / "latest" / RESULTS).is_file()


# ------------------------------------------------------------------------------------------ verdicts


VERDICT_CASES = [
    # (synthetic results.json, the test's expect=, passes, words in the failure message)
    (VALID, None, True, []),
    (INVALID, None, False, ["INVALID, expected valid: anomalies 3 duplicate (5 duplicate-records), 2 lost.",
                            "Report: {report}.", "Replay: onceproof run "]),
    (UNKNOWN, None, False, ["UNKNOWN, expected valid: no anomaly was found; unknown because fault-not-exercised: "
                            "kill-broker:leader.", "Report: {report}."]),
    (CRASHED, None, False, ["CRASHED, expected valid: the run ended before its check: RuntimeError('the Spark "
                            "query did not start in 240s') (the traceback is in the test's captured log", "Report: "
                            "{report}."]),
    (INVALID, "invalid", True, []),
    (VALID, "invalid", False, ["VALID, expected invalid: no anomaly was found; coverage: kill-executor: exercised "
                               "1 of 2 planned.", "Report: {report}."]),
    (UNKNOWN, ("invalid", "unknown"), True, []),
]


@pytest.mark.parametrize("outcome,expect,passes,words", VERDICT_CASES,
                         ids=[f"{o['verdict']}-expect-{e or 'default'}" for o, e, _, _ in VERDICT_CASES])
def test_the_verdict_passes_or_fails_the_test_and_goes_to_its_junit_properties(pytester, stand_in, outcome, expect,
                                                                               passes, words):
    stand_in.outcome = outcome
    mark = f", expect={expect!r}" if expect else ""
    pytester.makepyfile(test_v=f"""
        import pytest
        from pathlib import Path

        @pytest.mark.onceproof(sink="eos", nemesis="kill-executor", time_limit=30, seed=7{mark})
        def test_run(onceproof_run):
            r = onceproof_run()
            assert isinstance(r.run_dir, Path) and r.report == r.run_dir / "report.html"
            assert (r.verdict, r.exit_code, r.counts, r.coverage) == \\
                ({outcome['verdict']!r}, {EXIT[outcome['verdict']]}, {outcome.get('counts', {})!r},
                 {outcome.get('coverage', [])!r})
    """)
    junit = pytester.path / "junit.xml"
    res = pytester.runpytest(f"--junitxml={junit}", *plugin_args())
    res.assert_outcomes(**({"passed": 1} if passes else {"failed": 1}))
    (cfg,) = stand_in.configs
    run_dir = (cfg.results_root / cfg.name / "latest").resolve()
    case = junit_cases(junit)["test_run"]
    props = properties(case)
    want = {"onceproof.test": "eos-kill-executor", "onceproof.verdict": outcome["verdict"],
            "onceproof.exit_code": str(EXIT[outcome["verdict"]]), "onceproof.run_dir": str(run_dir),
            "onceproof.report": str(run_dir / "report.html"), "onceproof.replay": cfg.replay_command(),
            "onceproof.expected": ",".join((expect,) if isinstance(expect, str) else expect or ("valid",)),
            **{f"onceproof.count.{k}": str(v) for k, v in outcome.get("counts", {}).items()}}
    assert {k: props.get(k) for k in want} == want
    nonzero = ", ".join(f"{k}={v}" for k, v in outcome.get("counts", {}).items() if v) or "none"
    assert props["onceproof.anomalies"] == nonzero
    failure = case.find("failure")
    if passes:
        assert failure is None, failure.get("message")
        return
    message = failure.text.strip()  # the whole message; the message attribute has its first 500 characters
    assert "\n" not in message, f"want one paragraph, got:\n{message}"
    assert message.startswith("onceproof run eos-kill-executor was "), message
    assert failure.get("message").removeprefix("Failed: ").startswith(message[:400]), failure.get("message")
    for w in words:
        assert w.format(report=run_dir / "report.html") in message, message
    assert message.endswith(f"Replay: {cfg.replay_command()}"), message
    assert "Traceback" not in res.stdout.str() and "def run(" not in res.stdout.str(), "want the message, not a trace"


def test_a_run_without_a_report_says_how_to_rebuild_it(pytester, stand_in):
    stand_in.outcome, stand_in.report = INVALID, False
    pytester.makepyfile(test_v="def test_run(onceproof_run):\n    onceproof_run()\n")
    res = pytester.runpytest(*plugin_args())
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*No report.html (rebuild it with `onceproof report *`).*"])


def test_a_signal_during_a_run_ends_it_then_interrupts_the_session(pytester, stand_in):
    """SIGTERM inside the run (a CI cancel): the runner's teardown path gives verdict crashed, then the
    interrupt reaches pytest, which stops the session; the process's own handler and ``ONCEPROOF_RUN`` are
    as they were. If the plugin did not route SIGTERM, this test's own handler gets it instead of the
    process dying, and the inner test fails with that handler's error."""
    stand_in.during = lambda: os.kill(os.getpid(), signal.SIGTERM)
    before = os.environ.get("ONCEPROOF_RUN")
    pytester.makepyfile(test_v="def test_run(onceproof_run):\n    onceproof_run()\n\n"
                               "def test_next(onceproof_run):\n    onceproof_run()\n")
    with sigterm_guard() as outer:
        res = pytester.runpytest(*plugin_args(), no_reraise_ctrlc=True)
        assert signal.getsignal(signal.SIGTERM) is outer, "the plugin left its SIGTERM handler installed"
    assert os.environ.get("ONCEPROOF_RUN") == before
    assert res.ret == pytest.ExitCode.INTERRUPTED, res.stdout.str()
    res.stdout.fnmatch_lines(["*Interrupted: terminated (SIGTERM)*"])
    assert len(stand_in.configs) == 1, "the session went on after the interrupt"
    (cfg,) = stand_in.configs
    results = json.loads((cfg.results_root / cfg.name / "latest" / RESULTS).read_text())
    assert (results["verdict"], results["error"]) == ("crashed", "terminated (SIGTERM)")


# ------------------------------------------------------------------------------------------ the cluster


CLUSTER_TESTS = """
    import pytest
    pytestmark = pytest.mark.onceproof(backend="stand-in", brokers=1)

    def test_uses_it(onceproof_cluster):
        assert onceproof_cluster.nodes == [1] and onceproof_cluster.bootstrap

    def test_fails_with_it(onceproof_cluster):
        assert False, "a failing test"

    def test_interrupted_with_it(onceproof_cluster):
        {last}
"""


@pytest.mark.parametrize("last,outcome", [
    ("pass", {"passed": 2, "failed": 1}),
    ("raise KeyboardInterrupt", None),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", None),
], ids=["tests-pass-and-fail", "ctrl-c", "sigterm"])
def test_the_cluster_is_started_once_per_module_and_stopped_on_every_exit_path(pytester, backend, last, outcome):
    pytester.makepyfile(test_c=textwrap.dedent(CLUSTER_TESTS).format(last=last))
    with sigterm_guard() as outer:
        res = pytester.runpytest(*plugin_args(), no_reraise_ctrlc=True)
        assert signal.getsignal(signal.SIGTERM) is outer, "the plugin left its SIGTERM handler installed"
    if outcome:
        res.assert_outcomes(**outcome)
    else:
        assert res.ret == pytest.ExitCode.INTERRUPTED, res.stdout.str()
    (cluster,) = backend.clusters
    assert cluster.calls == [("up",), ("down", False), ("clean",)]


def test_a_cluster_that_fails_to_start_is_still_stopped(pytester, backend):
    backend.fail_up = True
    pytester.makepyfile(test_c="def test_it(onceproof_cluster):\n    pass\n")
    res = pytester.runpytest("--onceproof-backend", "stand-in", *plugin_args())
    res.assert_outcomes(errors=1)
    res.stdout.fnmatch_lines(["*ClusterError: stand-in: the brokers did not start*"])
    (cluster,) = backend.clusters
    assert cluster.calls == [("up",), ("down", False), ("clean",)]


@pytest.mark.parametrize("scope,clusters", [("module", 2), ("session", 1)])
def test_the_cluster_scope_option_shares_one_cluster_across_modules_or_not(pytester, backend, scope, clusters):
    body = """
        import pytest
        @pytest.mark.parametrize("onceproof_cluster", [{"backend": "stand-in", "brokers": 2}], indirect=True)
        def test_it(onceproof_cluster):
            assert onceproof_cluster.nodes == [1, 2]
    """
    pytester.makepyfile(test_a=body, test_b=body)
    res = pytester.runpytest("--onceproof-cluster-scope", scope, *plugin_args())
    res.assert_outcomes(passed=2)
    assert len(backend.clusters) == clusters
    assert all(c.calls == [("up",), ("down", False), ("clean",)] for c in backend.clusters)


def test_a_backend_marker_that_cannot_reach_the_module_scoped_cluster_is_a_usage_error(pytester, backend):
    pytester.makepyfile(test_c="""
        import pytest
        @pytest.mark.onceproof(backend="stand-in")
        def test_it(onceproof_cluster):
            pass
    """)
    res = pytester.runpytest(*plugin_args())
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*@pytest.mark.onceproof(backend=...) on test_c.py::test_it cannot choose "
                              "onceproof_cluster, which is module-scoped: set it on the module*"])
    assert backend.clusters == []


@pytest.mark.parametrize("param,expected", [
    ({"backend": "stand-in", "sink": "eos"},
     "*onceproof_cluster takes backend, brokers and kafka_version, got sink='eos'; give run config to "
     "onceproof_run instead*"),
    ({"backend": "stand-in", "brokers": 0},
     "*brokers=0 (from parametrize('onceproof_cluster', ..., indirect=True)): must be ≥ 1, got 0*"),
    ("nowhere", "*backend='nowhere' (from parametrize('onceproof_cluster', ..., indirect=True)): unknown backend "
                "'nowhere'; choose one of local*"),
])
def test_a_bad_cluster_parameter_is_refused_before_a_cluster_is_built(pytester, backend, param, expected):
    pytester.makepyfile(test_c=f"""
        import pytest
        @pytest.mark.parametrize("onceproof_cluster", [{param!r}], indirect=True)
        def test_it(onceproof_cluster):
            pass
    """)
    res = pytester.runpytest(*plugin_args())
    res.assert_outcomes(errors=1)
    res.stdout.fnmatch_lines([expected])
    assert backend.clusters == []


# ------------------------------------------------------------------------------------------ the example


def test_the_ci_example_collects_with_strict_markers(pytester):
    example = REPO / "examples" / "ci" / "test_nightly.py"
    res = pytester.runpytest("--collect-only", "-q", "--strict-markers", "-p", "no:cacheprovider", str(example),
                             *plugin_args())
    assert res.ret == pytest.ExitCode.OK, res.stdout.str() + res.stderr.str()
    res.stdout.fnmatch_lines(["*2 tests collected*"])


# ------------------------------------------------------------------------------------------ the warm cluster


class StandInWarm:
    """Replaces ``runs.start_warm``: records each start (backend, directory) and stop; the directory gets a
    ``cluster.json`` so that ``--warm-cluster`` validates as for a real warm cluster."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, backend: str, data_dir: Path):
        self.calls.append(("start", backend))
        (data_dir / "cluster.json").write_text("{}")
        return SimpleNamespace(data_dir=data_dir, stop=lambda: self.calls.append(("stop",)))


WARM_TESTS = """
    def test_chooses_fresh(onceproof_run):
        onceproof_run(warm_cluster="")

    def test_asks_for_no_run(onceproof_run):
        pass

    def test_first(onceproof_run):
        onceproof_run()

    def test_second(onceproof_run):
        onceproof_run(nemesis="kill-executor")
"""


@pytest.mark.parametrize("option", [True, False], ids=["warm-cluster", "fresh-clusters"])
def test_the_warm_cluster_option_gives_every_run_one_cluster_started_once(pytester, stand_in, monkeypatch, option):
    warm = StandInWarm()
    monkeypatch.setattr(runs, "start_warm", warm)
    pytester.makepyfile(test_w=textwrap.dedent(WARM_TESTS))
    args = ["--onceproof-warm-cluster"] if option else []
    pytester.runpytest(*args, *plugin_args()).assert_outcomes(passed=4)
    dirs = [cfg.warm_cluster for cfg in stand_in.configs]
    if option:  # started by the first run that leases it, once
        assert warm.calls == [("start", "local"), ("stop",)], warm.calls
        assert dirs[0] == "" and dirs[1] and dirs[1] == dirs[2], dirs
        assert (Path(dirs[1]) / "cluster.json").is_file()
    else:
        assert warm.calls == [] and dirs == ["", "", ""], (warm.calls, dirs)


def test_a_warm_cluster_asked_for_by_no_run_never_starts(pytester, stand_in, monkeypatch):
    warm = StandInWarm()
    monkeypatch.setattr(runs, "start_warm", warm)
    pytester.makepyfile(test_w="def test_it(onceproof_run):\n    onceproof_run(warm_cluster='')\n")
    pytester.runpytest("--onceproof-warm-cluster", *plugin_args()).assert_outcomes(passed=1)
    assert warm.calls == [], warm.calls


@pytest.mark.parametrize("backend", ["docker", "external", "ssh"])
def test_the_warm_cluster_option_on_a_backend_without_one_is_a_usage_error(pytester, stand_in, backend):
    pytester.makepyfile(test_w="def test_it(onceproof_run):\n    onceproof_run()\n")
    res = pytester.runpytest("--onceproof-warm-cluster", "--onceproof-backend", backend, *plugin_args())
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()
    res.stderr.fnmatch_lines([f"*--onceproof-warm-cluster: the {backend} backend keeps no warm cluster*"])
    assert stand_in.configs == []
