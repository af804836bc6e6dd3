"""onceproof's pytest hooks and fixtures (entry point ``pytest11: onceproof``; see the package docstring).

Where a run's config comes from, later entries overriding earlier ones:

1. ``TestConfig``'s defaults;
2. ``--onceproof-backend NAME`` (``backend``) and ``--onceproof-results DIR`` (``results_root``; default: a
   directory under pytest's ``tmp_path_factory`` base, one per session);
3. ``@pytest.mark.onceproof(**config)`` on the module (``pytestmark``), then the class, then the test;
4. an indirect parameter: ``@pytest.mark.parametrize("onceproof_run", [{...}, ...], indirect=True)``
   (a dict of config, or a str naming the backend);
5. the keyword arguments of the call ``onceproof_run(**config)``.

``expect`` (a verdict, or a tuple of them; default ``valid``) may be given at any of 3-5.

``onceproof_cluster`` takes ``backend`` and ``brokers`` from 2-4 (its own indirect parameter:
``parametrize("onceproof_cluster", ["local", "docker"], indirect=True)`` or a dict). It lives for a module
(or the session, ``--onceproof-cluster-scope session``), so only markers at that level can choose it: a
``backend=``/``brokers=``/``kafka_version=`` marker on a class or a test that uses it is refused at collection (a usage
error), since the cluster it gets was built before and for other tests too.

Loading this module imports pytest, :mod:`onceproof.pytest_plugin.runs` and the backend registry, no more:
pytest loads it in every session of an environment where onceproof is installed, and the harness (pandas,
the Kafka client) is imported by ``runs`` only when a fixture asks for a run or a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from onceproof.backends import registry
from onceproof.backends.base import ClusterShape
from onceproof.pytest_plugin import runs

MARKER = "onceproof"
CLUSTER_KEYS = ("backend", "brokers", "kafka_version")  # the config keys that shape onceproof_cluster
_NO_PARAM = object()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("onceproof", "onceproof: exactly-once runs of a Kafka→Kafka Spark pipeline under faults")
    g.addoption("--onceproof-backend", default=None, metavar="NAME",
                help="backend of onceproof_run and onceproof_cluster (default: the harness's default, local); "
                     "a marker or indirect parameter overrides it")
    g.addoption("--onceproof-results", default=None, metavar="DIR",
                help="results root of onceproof_run's runs (default: onceproof-results/ under pytest's "
                     "basetemp); upload it from CI: each run's report.html, results.json and logs")
    g.addoption("--onceproof-cluster-scope", default="module", choices=("module", "session"),
                help="how long one onceproof_cluster lives (default: module)")
    g.addoption("--onceproof-warm-cluster", action="store_true",
                help="onceproof_run's runs lease one warm cluster for the session (brokers kept up across runs, "
                     "started at the first run, stopped at the session's end) instead of each starting its own; "
                     "a run of another shape (a clock or disk fault, another broker count or Kafka release) "
                     "starts its own, and its results.json says why")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**config, expect='valid'): the onceproof run's config for this test, class or module "
        "(keys: onceproof.harness.config.TestConfig fields, e.g. sink='eos', nemesis='kill-executor', time_limit=60, "
        "seed=1, backend='local'); expect: the verdict the test wants, or a tuple of verdicts "
        "(valid, invalid, unknown, crashed)")
    name = config.getoption("onceproof_backend")
    if name is not None and name not in registry.names():
        raise pytest.UsageError(f"--onceproof-backend: unknown backend {name!r}; choose one of "
                                f"{', '.join(registry.names())}")
    warm = config.getoption("onceproof_warm_cluster")
    if warm and not registry.backend_class(name or registry.DEFAULT).warm_clusters:
        raise pytest.UsageError(f"--onceproof-warm-cluster: the {name} backend keeps no warm cluster; leave the "
                                "option out, or use --onceproof-backend local")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a ``backend=``/``brokers=`` marker that cannot reach ``onceproof_cluster``: one below the
    module (module scope) or any (session scope)."""
    scope = config.getoption("onceproof_cluster_scope")
    for item in items:
        if "onceproof_cluster" not in getattr(item, "fixturenames", ()):
            continue
        for node, mark in item.iter_markers_with_node(MARKER):
            keys = [k for k in CLUSTER_KEYS if k in mark.kwargs]
            if keys and not (scope == "module" and isinstance(node, pytest.Module)):
                where = ("on the module (pytestmark = pytest.mark.onceproof(...))" if scope == "module"
                         else "with --onceproof-backend (the cluster lives for the session)")
                raise pytest.UsageError(
                    f"@pytest.mark.onceproof({', '.join(f'{k}=...' for k in keys)}) on {node.nodeid} cannot "
                    f"choose onceproof_cluster, which is {scope}-scoped: set it {where}, or parametrize "
                    "onceproof_cluster indirectly")


# ------------------------------------------------------------------------------------------- settings


def _settings(request: pytest.FixtureRequest, keys: tuple[str, ...] | None = None) -> dict[str, runs.Setting]:
    """``{key: Setting}`` from ``--onceproof-backend``, the markers (farthest first) and the fixture's
    indirect parameter; only ``keys`` when given (then a parameter naming another key is an error).

    Raises: ``OnceproofConfigError`` for a marker with positional arguments or a parameter that is
    neither a str (backend) nor a dict.
    """
    given: dict[str, runs.Setting] = {}
    backend = request.config.getoption("onceproof_backend")
    if backend is not None:
        given["backend"] = runs.Setting(backend, "--onceproof-backend")
    for node, mark in reversed(list(request.node.iter_markers_with_node(MARKER))):
        if mark.args:
            raise runs.OnceproofConfigError(None, f"@pytest.mark.onceproof{mark.args!r} on {node.nodeid}: takes "
                                                  "keyword arguments only; write e.g. "
                                                  "@pytest.mark.onceproof(sink='eos')")
        for k, v in mark.kwargs.items():
            if keys is None or k in keys:
                given[k] = runs.Setting(v, f"@pytest.mark.onceproof on {node.name}")
    param = getattr(request, "param", _NO_PARAM)
    if param is not _NO_PARAM:
        where = f"parametrize({request.fixturename!r}, ..., indirect=True)"
        if isinstance(param, str):
            param = {"backend": param}
        if not isinstance(param, dict):
            raise runs.OnceproofConfigError(None, f"{where}: a parameter of {request.fixturename} is a dict of "
                                                  f"config or a str naming the backend, got {param!r}")
        for k, v in param.items():
            if keys is not None and k not in keys:
                takes = f"{', '.join(keys[:-1])} and {keys[-1]}" if len(keys) > 1 else keys[0]
                raise runs.OnceproofConfigError(k, f"{where}: {request.fixturename} takes {takes}, "
                                                   f"got {k}={v!r}; give run config to onceproof_run instead")
            given[k] = runs.Setting(v, where)
    return given


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def onceproof_results_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results root of this session's onceproof runs: ``--onceproof-results DIR`` (created), else
    ``onceproof-results/`` under pytest's basetemp. Holds ``<test>/<time>/`` per run and ``index.html``."""
    opt = request.config.getoption("onceproof_results")
    if opt:
        path = Path(opt).absolute()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("onceproof-results", numbered=False)


def _cluster_scope(fixture_name: str, config: pytest.Config) -> str:
    return config.getoption("onceproof_cluster_scope")


@pytest.fixture(scope=_cluster_scope)
def onceproof_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running Kafka cluster (``onceproof.backends.base.Cluster``: ``.bootstrap`` host:port,..., ``.nodes``,
    ``.log_dir``) of the chosen backend, for a module (or the session: ``--onceproof-cluster-scope``).

    Backend, broker count and Kafka release: ``--onceproof-backend``, ``pytestmark =
    pytest.mark.onceproof(backend=..., brokers=..., kafka_version=...)`` on the module, or
    ``parametrize("onceproof_cluster", ["local"], indirect=True)``; default ``local``, 3 brokers, the pinned
    release. Stopped on every exit path: the test's end, its failure, Ctrl-C, and
    SIGTERM (routed to an interrupt while the cluster lives). Data and logs under pytest's basetemp.
    ``onceproof_run`` does not use it: each run builds its own cluster, or leases ``onceproof_warm_cluster``.
    """
    given = _settings(request, CLUSTER_KEYS)
    data = tmp_path_factory.mktemp("onceproof-cluster")
    given["results_root"] = runs.Setting(data, "onceproof_cluster's data directory")  # validated, not written
    cfg = runs.config_from_kwargs(given)
    backend = registry.get(cfg.backend)
    with runs.Interrupts():
        cluster = backend.cluster(ClusterShape(data, nodes=cfg.brokers, log_dir=data / "logs",
                                               kafka_version=cfg.kafka_version))
        try:
            cluster.up()
            yield cluster
        finally:
            cluster.down()
            cluster.clean()


@pytest.fixture(scope="session")
def onceproof_warm_cluster(request: pytest.FixtureRequest,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[runs.WarmLease | None]:
    """With ``--onceproof-warm-cluster``: the session's :class:`~onceproof.pytest_plugin.runs.WarmLease`,
    the warm cluster ``onceproof_run``'s runs lease (``onceproof.harness.warm``: 3 brokers of the pinned
    release on ``--onceproof-backend``'s backend, behind toxiproxy, each in a cgroup of its own). It starts
    when the first run that leases it starts (a failed start fails that test, and the next run tries
    again) and stops, with its reaper, at the session's end; a SIGKILLed pytest's reaper sweeps its
    brokers. Without the option: ``None``, and nothing starts."""
    if not request.config.getoption("onceproof_warm_cluster"):
        yield None
        return
    lease = runs.WarmLease(request.config.getoption("onceproof_backend") or registry.DEFAULT,
                           lambda: tmp_path_factory.mktemp("onceproof-warm-cluster"))
    try:
        yield lease
    finally:
        lease.stop()


@pytest.fixture
def onceproof_run(request: pytest.FixtureRequest, onceproof_results_dir: Path,
                  onceproof_warm_cluster: runs.WarmLease | None) -> Callable[..., Any]:
    """``onceproof_run(**config) -> RunResult``: one whole onceproof run (its own fresh cluster, or with
    ``--onceproof-warm-cluster`` the session's warm one, workload, faults, check, report) with the config of
    ``--onceproof-backend``, the ``onceproof`` markers, an indirect parameter and the call's keywords
    (``TestConfig`` fields, validated as ``onceproof run`` validates them; a bad key or value raises
    ``OnceproofConfigError`` naming the fix; ``expect``: the verdict(s) wanted, default ``valid``). A run
    given ``warm_cluster=`` itself, or on another backend than the session's, keeps its own choice.

    Returns ``RunResult`` (``verdict``, ``exit_code``, ``counts``, ``coverage``, ``run_dir``, ``report``).
    The run's verdict, counts and report path go to the test's JUnit properties (``onceproof.*``). A
    verdict not in ``expect`` fails the test with one paragraph naming the anomalies and the report.
    """
    base = _settings(request)
    source = "--onceproof-results" if request.config.getoption("onceproof_results") else "pytest's basetemp"

    def run(**config: Any) -> runs.RunResult:
        __tracebackhide__ = True  # a config error or a failed verdict points at the test's own line
        given = {"results_root": runs.Setting(onceproof_results_dir, source), **base}
        given.update({k: runs.Setting(v, "onceproof_run()") for k, v in config.items()})
        lease = onceproof_warm_cluster
        if lease is not None and "warm_cluster" not in given and runs.backend_of(given) == lease.backend:
            given["warm_cluster"] = runs.Setting(str(lease.data_dir()), "--onceproof-warm-cluster")
        expect = runs.parse_expect(given.pop(runs.EXPECT, runs.Setting("valid", "the default")))
        cfg = runs.config_from_kwargs(given)
        result, interrupted = runs.run_one(cfg)
        request.node.user_properties.extend(runs.junit_properties(result, expect))
        if interrupted is not None:
            raise interrupted
        failure = runs.judge(result, expect)
        if failure:
            pytest.fail(failure, pytrace=False)
        return result

    return run
