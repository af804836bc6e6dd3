"""``TestConfig``: everything that defines a run, the one source of the CLI's ``run`` options, their
validation, the replay command and ``test.json``'s ``config``. Times in seconds unless the name ends in
``_ms``.

Every dataclass field is a ``run`` option (``--<field-name>`` with ``_`` → ``-``, or the field's
``flag``); its help text, bounds and the conversion between the option's text and the field's value
live in the field's metadata. So a new field is at once an option, validated, written to ``test.json``
and carried by :meth:`TestConfig.replay_command` (whenever it differs from its default). The CLI builds
``run`` from these fields (``harness/cli/``); this module knows nothing of the CLI.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onceproof.backends import capabilities, registry
from onceproof.backends.base import BackendError, Runtimes, can_perform
from onceproof.backends.common import interpreter, jars, spark_release
from onceproof.backends.user_pipeline import PipelineCommand, PipelineCommandError
from onceproof.checkout import repository
from onceproof.clients import durability
from onceproof.nemesis import catalog, schedule
from onceproof.sinks import registry as sinks
from onceproof.sinks import user_outputs
from onceproof.sinks.base import CAPABILITIES
from onceproof.store.runs import DEFAULT_ROOT
from onceproof.workloads import producers
from onceproof.workloads import registry as workloads


class ConfigError(ValueError):
    """A ``run`` option has a value that cannot work; ``option`` is the option's flag (``--rate``)."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


def _opt(default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable | None = None,
         flag: str | None = None, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
         parse: Callable[[str], Any] | None = None, fmt: Callable[[Any], str] | None = None,
         check: Callable[[Any], str | None] | None = None, example: Any = None, always: bool = False,
         choices: Callable[[], list[str]] | None = None, replayed: bool = True):
    """A field that is also a ``run`` option.

    ``lo``/``hi``: inclusive bounds (``lo_open``: ``lo`` itself is excluded); numbers must also be finite.
    ``parse``/``fmt``: option text → value and back, for fields whose type is not the option's (the
    option is then a string). ``check``: extra test returning an error message or ``None``.
    ``example``: a valid non-default value, for tests that walk every option. ``always``: the replay
    command names this option even at its default (the options that say what a run is). ``choices``:
    the valid values, asked when needed (a registry that may grow). ``replayed=False``: the replay command
    leaves the option out (it says where a run ran, not what it tested).
    """
    md = {"help": help, "flag": flag, "lo": lo, "hi": hi, "lo_open": lo_open, "parse": parse, "fmt": fmt,
          "check": check, "example": example, "always": always, "choices": choices, "replayed": replayed}
    if factory is not None:
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)


def _check_upgrade_release(version: str) -> str | None:
    """Why ``--kafka-upgrade-to`` cannot be ``version``: not a supported release, or older than 3.6 (its
    ``kafka-features`` tool is in ``kafka-tools`` from 3.6 on)."""
    why = jars.kafka_version_problem(version)
    if why:
        return why
    if jars.version_tuple(version) < (3, 6):
        return f"a rolling upgrade goes to 3.6.0 or newer, not {version}: name a newer release"
    return None


def _fmt_nemesis(faults: list[str]) -> str:
    if list(faults) == catalog.all_specs():  # exactly "all", in its order (the order seeds the plan)
        return "all"
    return ",".join(faults) or "none"


ORDERED_TABLES = ("postgres", "delta", "iceberg")
"""The user outputs whose reader takes ``--order-column`` (``sinks/postgres_table.py``, ``sinks/delta_table.py``,
``sinks/iceberg_table.py``)."""


def _check_sink(v: str) -> str | None:
    return None if v in sinks.SINKS else f"unknown sink {v!r}; choose one of {', '.join(sinks.SINKS)}"


def _check_workload(v: str) -> str | None:
    return None if v in workloads.names() else f"unknown workload {v!r}; choose one of {', '.join(workloads.names())}"


def _check_pipeline_cmd(v: str) -> str | None:
    if not v:
        return None

    try:
        PipelineCommand.parse(v)
    except PipelineCommandError as e:
        return str(e)
    return None


def read_schedule(path: str | os.PathLike) -> list[dict]:
    """The faults of a schedule file (``onceproof run --schedule``; written by ``onceproof shrink``): JSON
    ``{"faults": [{"at_s": s, "f": "<fault[:target]>", "rng": "<target RNG key>"?}, ...]}``, ``at_s`` in
    seconds from the pipeline's first committed batch. ``rng`` (optional) seeds the fault's choice of
    target (broker, sink partition) as in the run it came from (``nemesis/runner.py``). ``hold_s``
    (optional, s) is that fault's hold instead of ``--fault-hold`` (a session's ``--for``).

    Raises: ``ValueError`` naming the file and what is wrong with it.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"{p}: no such schedule file (write one with `onceproof shrink RUN_DIR`)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a JSON schedule: {e}") from None
    faults = doc.get("faults") if isinstance(doc, dict) else None
    if not isinstance(faults, list):
        raise ValueError(f'{p}: expected {{"faults": [{{"at_s": 12.5, "f": "kill-executor"}}, ...]}}')
    out = []
    for i, f in enumerate(faults):
        if not isinstance(f, dict) or not isinstance(f.get("at_s"), (int, float)) or f["at_s"] < 0 \
                or not math.isfinite(f["at_s"]) or not isinstance(f.get("f"), str):
            raise ValueError(f"{p}: fault {i} needs a number at_s ≥ 0 (s) and a fault name f, got {f!r}")
        catalog.parse(f["f"])  # ValueError naming the unknown fault or target
        hold = f.get("hold_s")
        if hold is not None and (not isinstance(hold, (int, float)) or not 0 < hold < math.inf):
            raise ValueError(f"{p}: fault {i}'s hold_s must be a number > 0 (s), got {hold!r}")
        out.append({"at_s": float(f["at_s"]), "f": f["f"], "rng": f.get("rng"),
                    "hold_s": None if hold is None else float(hold)})
    return sorted(out, key=lambda f: f["at_s"])


def _check_schedule(v: str) -> str | None:
    if not v:
        return None
    try:
        read_schedule(v)
    except ValueError as e:
        return str(e)
    return None


def _check_nemesis(v: list[str]) -> str | None:
    try:
        catalog.parse(",".join(v))
    except ValueError as e:
        return str(e)
    return None


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def _check_test_name(v: str) -> str | None:
    if v == "":
        return None
    if v == "latest" or not _NAME.match(v):
        return (f"{v!r} cannot name a results directory: use letters, digits, '.', '_', '+', '-' "
                "(not starting with one of the last four; not 'latest')")
    return None


def _check_results(v: Path) -> str | None:
    p = Path(v)
    if p.exists() and not p.is_dir():
        return f"{p} exists and is not a directory"
    q = p.absolute()
    while not q.exists():
        q = q.parent
    if not q.is_dir():
        return f"{p} cannot be created: {q} is not a directory"
    if not os.access(q, os.W_OK | os.X_OK):
        return f"{p} cannot be created: {q} is not writable"
    return None


def _check_backend(v: str) -> str | None:
    names = registry.names()
    return None if v in names else f"unknown backend {v!r}; choose one of {', '.join(names)}"


def kafka_release_refusal(backend, option: str = "--kafka-version") -> str | None:
    """Why ``backend`` cannot start its brokers on the release ``option`` names (its ``picks_kafka_version``
    is false), naming the backends that can; ``None`` when it can."""
    if backend.picks_kafka_version:
        return None
    return (f"the {backend.name} backend does not start its brokers on a release a run chooses; drop "
            f"{option}, or use --backend "
            + ", ".join(n for n in registry.names() if registry.backend_class(n).picks_kafka_version))


def runtime_backends() -> str:
    """The backends whose pipeline can run a second PySpark (the ``Runtimes`` protocol), comma-separated."""
    return ", ".join(n for n in registry.names() if capabilities.implements(registry.backend_class(n), Runtimes))


def runtime_refusal(backend: type, option: str = "--spark-version") -> str | None:
    """Why the backend class ``backend`` cannot run the pipeline on the PySpark ``option`` names (its pipeline
    runs one PySpark: no ``Runtimes``), naming the backends that can; ``None`` when it can."""
    if capabilities.implements(backend, Runtimes):
        return None
    return f"the {backend.name} backend runs one PySpark only; drop {option}, or use --backend {runtime_backends()}"


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
"""The repository's worked examples (``nodes.toml``, ``cluster.toml``), in a checkout."""


def _check_file(v: str, what: str) -> str | None:
    if v and not Path(v).expanduser().is_file():
        return f"no such file {v}; give the {what} file (docs/backends.md shows one)"
    return None


def _check_warm_dir(v: str) -> str | None:
    if v and not (Path(v).expanduser() / "cluster.json").is_file():
        return (f"no cluster in {v}: start a warm one with `onceproof cluster up --dir {v}`, or leave "
                "--warm-cluster out")
    return None


def _check_master(v: str) -> str | None:
    return None if v.strip() else "must name a Spark master, e.g. local-cluster[2,1,1024] or local[2]"


@dataclass
class TestConfig:
    """Everything that defines a run; saved as ``test.json``. Times in seconds unless named ``_ms``."""

    __test__ = False  # not a pytest test class

    sink: str = _opt(sinks.DEFAULT, "eos (transactional sink), at-least-once (Spark's Kafka sink), eos-no-marker "
                            "(a mutant without the replay marker check), file (Spark's file sink, read "
                            "through its _spark_metadata log), postgres, delta, delta-foreachbatch, iceberg or "
                            "iceberg-foreachbatch (a table read at its commit point), or a mutant of one "
                            "(docs/cli.md lists them)",
                     check=_check_sink, example="at-least-once",
                     always=True)
    workload: str = _opt("keyed", "what the input holds and the pipeline computes: keyed (every record once, in "
                                  "order per key) or counter (a running count and sum per key in Spark state, "
                                  "update mode)", check=_check_workload, example="counter")
    producer: str = _opt(producers.DEFAULT, "how the workload writes its input: transactional (~200 ms of sends "
                                            "per Kafka transaction, --input-aborts of them aborted on purpose, one "
                                            "held open 3 s), at-most-once (each send tried once, no transactions: "
                                            "no client resend exists to become visible) or idempotent "
                                            "(librdkafka's idempotent producer, to test the client: its resends "
                                            "become platform findings)",
                         check=lambda v: None if v in producers.PRODUCERS else
                         f"unknown producer {v!r}; choose one of {', '.join(producers.PRODUCERS)}",
                         example="idempotent")
    input_aborts: float = _opt(0.1, "the fraction of the workload's input transactions aborted on purpose "
                                    "(transactional producer only; 0 turns it off): a pipeline that reads its "
                                    "input at read_uncommitted copies their records (aborted-input-read)",
                               lo=0, hi=1, example=0.0)
    file_read: str = _opt("committed", "--sink file: how the checker reads the output directory: committed (only "
                                       "the files its _spark_metadata log lists, the sink's read_committed) or "
                                       "listing (every data file, as a careless downstream job does: a mutant "
                                       "reader)", check=lambda v: None if v in ("committed", "listing") else
                          f"unknown file reader {v!r}; choose committed or listing", example="listing")
    pipeline_cmd: str = _opt("", "run your own PySpark pipeline instead of the bundled one: its command line, "
                                 "with the placeholders {python} {bootstrap} {input_topic} {output_topic} "
                                 "{checkpoint} {master} {jars}, and {output_path}, {postgres_dsn} "
                                 "{output_table} or {iceberg_conf} {output_table} for its --output "
                                 "(docs/pipeline-contract.md); restarted with the same values after every crash",
                             check=_check_pipeline_cmd,
                             example="{python} examples/user_pipeline.py --bootstrap {bootstrap} "
                                     "--input-topic {input_topic} --output-topic {output_topic} "
                                     "--checkpoint {checkpoint} --jars {jars}")
    pipeline_python: str = _opt("", "--pipeline-cmd: the python of your job's own environment (its PySpark 3.5 or 4.x, "
                                    "Delta, drivers): {python}, the Python workers' interpreter, and the PySpark "
                                    "whose Kafka connector {jars} names; default: onceproof's own",
                                example="~/venvs/job/bin/python")
    output: str = _opt(user_outputs.DEFAULT, "--pipeline-cmd: what your job writes, read at its commit point: "
                                             "kafka ({output_topic}, at read_committed), files (Spark's file sink "
                                             "in {output_path}, through its _spark_metadata log), delta (a Delta "
                                             "table in {output_path}, at its latest committed version), postgres "
                                             "({output_table} in {postgres_dsn}, a server the run starts; at "
                                             "REPEATABLE READ) or iceberg ({output_table} in the catalog "
                                             "{iceberg_conf} defines, at its current snapshot). "
                                             "docs/pipeline-contract.md",
                       check=lambda v: None if v in user_outputs.OUTPUTS else
                       f"unknown output {v!r}; choose one of {', '.join(user_outputs.names())}", example="postgres")
    order_column: str = _opt("", "--output postgres, delta or iceberg: the table's column that gives the "
                                 "rows' commit or insertion order (an integer or a timestamp), by which the "
                                 "order per key is judged; default: id when the table has one, else the order "
                                 "is not judged",
                             check=lambda v: None if not v or v.replace("_", "").isalnum() else
                             f"{v!r} is not a column name: letters, digits and _ only", example="committed_at")
    nemesis: list[str] = _opt(help="comma-separated faults (name or name:target), 'all' or 'none'. "
                                   "See `onceproof faults`.", factory=list, parse=catalog.parse, fmt=_fmt_nemesis,
                              check=_check_nemesis, example=["kill-broker:leader", "kill-executor"], always=True)
    schedule: str = _opt("", "replay an explicit fault schedule instead of planning one from --nemesis: a JSON "
                             "file {\"faults\": [{\"at_s\", \"f\", \"rng\"}]} (onceproof shrink writes them)",
                         check=_check_schedule,
                         example=str((repository() or Path.cwd()) / "examples" / "schedule.json"))
    nemesis_interval: float = _opt(10.0, "seconds between faults (±25%, seeded)", lo=0, lo_open=True,
                                   always=True)
    time_limit: float = _opt(60.0, "seconds of workload and faults", lo=0, lo_open=True, always=True)
    rate: float = _opt(300.0, "input records per second", lo=0, lo_open=True, hi=1_000_000, always=True)
    keys: int = _opt(50, "number of workload keys", lo=1, hi=1_000_000, always=True)
    seed: int = _opt(0, "seeds the workload and the fault schedule; same seed, same schedule", lo=0,
                   always=True)
    recovery_timeout: float = _opt(180.0, "seconds to wait for the pipeline to catch up after the faults",
                                   lo=0, lo_open=True)
    startup_timeout: float = _opt(240.0, "seconds to wait for the Spark query to start", lo=0, lo_open=True)
    strict: bool = _opt(False, "count platform findings (the input log's anomalies: input-duplicate, lost-write, "
                               "failed-write-visible) in the verdict and the exit code, not only beside it")
    recovery_bound: float = _opt(120.0, "liveness: seconds after the last heal within which input appended "
                                        "after it must be visible in the output (else no-recovery)",
                                 lo=0, lo_open=True, example=60.0)
    visibility_bound: float = _opt(180.0, "liveness: seconds from an input record's append to its output "
                                          "being visible at read_committed, fault windows not counted (else "
                                          "late-visibility)",
                                   lo=0, lo_open=True, example=90.0)
    leftover_bound: float = _opt(5.0, "liveness: seconds a transaction open at a driver kill may still hold an "
                                      "output partition's LSO after the next driver's query started (else "
                                      "leftover-transaction)", lo=0, example=10.0)
    hang_margin: float = _opt(30.0, "liveness: an output partition's LSO held below its high watermark, "
                                    "outside fault windows, longer than transaction.timeout.ms plus this "
                                    "many seconds is a hanging-transaction", lo=0, example=10.0)
    trigger_ms: int = _opt(1000, "micro-batch trigger interval, ms", lo=1)
    max_offsets: int = _opt(5000, "maxOffsetsPerTrigger of the Spark Kafka source (records per batch)", lo=1)
    txn_timeout_ms: int = _opt(30000, "the eos sink's transaction.timeout.ms (ms; ≥ 5000: it must outlast the "
                                      "2 s commit delay, and message.timeout.ms is 5 s less; ≤ 900000, the "
                                      "brokers' transaction.max.timeout.ms)", lo=5000, hi=900000,
                             always=True)
    fault_hold: float = _opt(6.0, "seconds a start/stop fault (pause, partition, delay) stays on", lo=0,
                             lo_open=True, always=True)
    max_run_factor: float = _opt(3.0, "the run may go on up to this × --time-limit (counted from the "
                                      "first committed batch) until every requested fault has had its turn",
                                 lo=1)
    partitions: int = _opt(6, "partitions of the input and output topics", lo=1, hi=1000)
    brokers: int = _opt(3, "Kafka brokers (KRaft, combined broker+controller)", lo=1, hi=9)
    cluster_config: str = _opt(durability.DEFAULT, "how durable the input, output and progress topics are: "
                                                   + "; ".join(f"{d.name} ({d.summary})"
                                                               for d in durability.CONFIGS.values())
                               + ". The weak ones show that a fault can lose acknowledged writes and that the "
                                 "checker catches it (docs/faults.md, 'Disk faults')",
                               check=lambda v: None if v in durability.CONFIGS else
                               f"unknown cluster config {v!r}; choose one of {', '.join(durability.names())}",
                               example="weak-durability", choices=durability.names)
    kafka_version: str = _opt("", "the Apache Kafka release the brokers run, X.Y.Z from "
                                  + jars.SUPPORTED_KAFKA + " (KRaft; its jars from Maven Central, once); "
                                  "default: $" + jars.KAFKA_VERSION_ENV + ", else the pinned "
                                  "release (docs/versions.md)",
                              check=lambda v: jars.kafka_version_problem(v) if v else None,
                              example=jars.pinned_kafka_version())  # resolved by `make setup`: no Maven call
    kafka_upgrade_to: str = _opt("", "the Apache Kafka release the rolling-upgrade fault moves the brokers to, one "
                                     "at a time, then finalizing metadata.version (X.Y.Z, 3.6.0 or newer, not older "
                                     "than the brokers' own; docs/versions.md)",
                                 check=lambda v: _check_upgrade_release(v) if v else None,
                                 example=jars.pinned_kafka_version())
    spark_version: str = _opt("", "the PySpark release the bundled pipeline (its sink, its mutant) runs on: a "
                                  "line (3.5, 4.1: its newest patch that PyPI and Maven both serve, with its "
                                  "Kafka connector) or a release (3.5.7), from " + spark_release.SUPPORTED_SPARK
                                  + "; built once into a cached runtime (docs/versions.md); default: onceproof's "
                                  "own PySpark",
                              check=lambda v: spark_release.problem(v) if v else None, example="3.5")
    master: str = _opt("local-cluster[2,1,1024]", "Spark master of the driver", check=_check_master,
                       example="local[2]")
    backend: str = _opt(registry.DEFAULT, "where the cluster, the pipeline and the fault network run: "
                                          + ", ".join(registry.names()), check=_check_backend,
                        choices=registry.names)
    nodes: str = _opt("", "--backend ssh: the machines to run on (nodes.toml; docs/backends.md, examples/nodes.toml)",
                      check=lambda v: _check_file(v, "nodes"), example=str(EXAMPLES / "nodes.toml"))
    cluster_file: str = _opt("", "--backend external: the running cluster and its fault map (cluster.toml; "
                                 "docs/backends.md, examples/cluster.toml)", flag="--cluster",
                             check=lambda v: _check_file(v, "cluster"), example=str(EXAMPLES / "cluster.toml"))
    test_name: str = _opt("", "results/<test-name>/...; default <sink>-<faults>", check=_check_test_name,
                          example="my-test")
    results_root: Path = _opt(DEFAULT_ROOT, "results root directory", flag="--results", check=_check_results)
    keep_data: bool = _opt(False, "keep the brokers' data directories after the run")
    warm_cluster: str = _opt("", "run on the warm cluster in this directory (`onceproof cluster up --dir DIR`) "
                                 "instead of starting brokers: the run proves it healthy first (restarting a "
                                 "dead or lagging broker), makes topics of its own and leaves it up. A run whose "
                                 "faults need brokers of another shape starts a fresh cluster and says why "
                                 "(docs/performance.md, 'Warm clusters')",
                             check=_check_warm_dir, example="", replayed=False)
    proxy: bool = _opt(False, "run the cluster behind toxiproxy even without network faults "
                              "(automatic with partition / slow-network)")
    keep_last: int = _opt(0, "after the run, delete this test's older runs, keeping the newest N "
                             "(0 keeps all)", lo=0)

    # ------------------------------------------------------------------ derived
    @property
    def backend_options(self) -> registry.BackendOptions:
        """What the backend needs beyond its name: ``--nodes`` and ``--cluster`` as paths."""
        return registry.BackendOptions(nodes=Path(self.nodes).expanduser() if self.nodes else None,
                                       cluster=Path(self.cluster_file).expanduser() if self.cluster_file else None)

    def backend_instance(self):
        """The backend this config runs on (``registry.get`` with :attr:`backend_options`).

        Raises: ``ConfigError`` for ``--backend`` naming what the backend refused (a missing ``--nodes``,
        a broken ``nodes.toml`` or ``cluster.toml``)."""
        try:
            return registry.get(self.backend, self.backend_options)
        except BackendError as e:
            raise ConfigError("--backend", str(e)) from None

    @property
    def proxied(self) -> bool:
        return self.proxy or catalog.needs_proxy(self.faults)

    @property
    def faults(self) -> list[str]:
        """The specs this run injects: ``nemesis``, except that ``all`` leaves out what the sink cannot
        take (:attr:`faults_left_out`); an explicit spec the sink cannot take is refused by :meth:`validate`."""
        return self._split()[0]

    @property
    def faults_left_out(self) -> dict[str, str]:
        """``{spec: why}`` for the specs of ``all`` this run's sink cannot take (empty unless ``all``)."""
        return {s: f"{self.sink_label} has no {self._lacks(m)}" for s, m in self._split()[1].items()}

    @property
    def sink_capabilities(self) -> frozenset[str]:
        """What the pipeline's sink lets faults use (its entry, ``sinks/registry.py``): the bundled sink's, or none
        for a ``--pipeline-cmd`` pipeline, whose sink onceproof knows nothing of."""
        return frozenset() if self.pipeline_cmd else sinks.get(self.sink).capabilities

    @property
    def sink_entry(self):
        """The :class:`~onceproof.sinks.base.Sink` entry the run writes and reads: the ``--output`` of a
        ``--pipeline-cmd`` pipeline (``sinks/user_outputs.py``), else the bundled pipeline's ``--sink``.
        Raises ``ValueError`` for an unknown name."""
        return user_outputs.get(self.output).entry() if self.pipeline_cmd else sinks.get(self.sink)

    @property
    def sink_label(self) -> str:
        """How messages name the sink under test."""
        return "a --pipeline-cmd pipeline's sink" if self.pipeline_cmd else f"the {self.sink} sink"

    def _split(self) -> tuple[list[str], dict[str, list[str]]]:
        if self.schedule:
            return list(dict.fromkeys(f["f"] for f in read_schedule(self.schedule))), {}
        if not catalog.is_all(self.nemesis) or self.sink not in sinks.SINKS:
            return list(self.nemesis), {}
        return catalog.for_sink(self.nemesis, self.sink_capabilities)

    @staticmethod
    def _lacks(missing: list[str]) -> str:
        return " and no ".join(CAPABILITIES[m] for m in missing)

    def target_choices(self) -> dict[str, tuple[str, ...]]:
        """``{fault: targets}`` a fault given without a target draws from: the catalog's, without the
        targets this run's sink cannot take (``kill-broker`` against at-least-once never draws
        ``txn-coordinator``)."""
        return catalog.target_choices(self.sink_capabilities)

    @property
    def name(self) -> str:
        if self.test_name:
            return self.test_name
        pipeline = self.sink if self.workload == "keyed" else f"{self.workload}-{self.sink}"
        if self.pipeline_cmd:  # the script's name (my_job.py → my_job), else "user"
            pipeline = PipelineCommand.parse(self.pipeline_cmd).script_name() or "user"
        if self.schedule:
            faults = f"schedule-{len(read_schedule(self.schedule))}-faults"
        elif catalog.is_all(self.nemesis):
            faults = "all"
        elif len(self.nemesis) > 3:
            faults = f"{len(self.nemesis)}-faults"
        else:
            faults = "+".join(self.nemesis).replace(":", "-") or "no-faults"
        weak = "" if self.cluster_config == durability.DEFAULT else f"-{self.cluster_config}"
        return f"{pipeline}-{faults}{weak}"

    # ------------------------------------------------------------------ options
    @staticmethod
    def options() -> list[dataclasses.Field]:
        """Every field, in order; each is a ``run`` option (see :func:`flag`)."""
        return list(dataclasses.fields(TestConfig))

    @staticmethod
    def flag(f: dataclasses.Field) -> str:
        """The option of field ``f``: its ``flag`` metadata, else ``--`` + name with ``_`` → ``-``."""
        return f.metadata.get("flag") or "--" + f.name.replace("_", "-")

    @staticmethod
    def _field(name: str) -> dataclasses.Field:
        return next(f for f in dataclasses.fields(TestConfig) if f.name == name)

    @staticmethod
    def default_of(f: dataclasses.Field) -> Any:
        """Field ``f``'s default value."""
        return f.default_factory() if f.default is dataclasses.MISSING else f.default

    @classmethod
    def from_cli(cls, params: dict[str, Any]) -> TestConfig:
        """Build a config from option values keyed by field name, as the CLI parsed them (text for fields
        with a ``parse``). Unknown keys are ignored; missing ones take their defaults. Not validated.

        Raises: ``ConfigError`` naming the option whose text cannot be parsed (e.g. an unknown fault).
        """
        kw = {}
        for f in cls.options():
            if f.name not in params:
                continue
            v = params[f.name]
            if f.metadata.get("parse") and isinstance(v, str):
                try:
                    v = f.metadata["parse"](v)
                except ValueError as e:
                    raise ConfigError(cls.flag(f), str(e)) from None
            kw[f.name] = v
        return cls(**kw)

    def validate(self) -> TestConfig:
        """Check every option before anything starts; returns ``self``.

        Numbers must be finite and within the field's bounds; strings are checked by the field's
        ``check`` (sink, faults, test name, results root, master, backend); every fault must be one the
        backend can perform; the faults' schedule must fit the time limit.

        Raises: ``ConfigError`` with the option's flag and a one-line reason, for the first bad option.
        """
        for f in self.options():
            v = getattr(self, f.name)
            md = f.metadata
            opt = self.flag(f)
            if isinstance(v, bool):
                continue
            if isinstance(v, (int, float)):
                if isinstance(v, float) and not math.isfinite(v):
                    raise ConfigError(opt, f"must be a finite number, got {v}")
                lo, hi = md.get("lo"), md.get("hi")
                if lo is not None and (v <= lo if md.get("lo_open") else v < lo):
                    raise ConfigError(opt, f"must be {'>' if md.get('lo_open') else '≥'} {lo:g}, got {v:g}")
                if hi is not None and v > hi:
                    raise ConfigError(opt, f"must be ≤ {hi:g}, got {v:g}")
            if md.get("check"):
                msg = md["check"](v)
                if msg:
                    raise ConfigError(opt, msg)
        self._check_capabilities()
        try:
            self.fault_plan()
        except schedule.PlanDoesNotFit as e:
            raise ConfigError("--time-limit", str(e)) from None
        return self

    def _check_sink_fits(self, backend) -> None:
        """The sink's entry against the backend, the workload and ``--file-read``: a sink that writes a
        directory needs a backend whose executors write where the harness reads (``file_sinks``), the
        workload's output mode must be one the sink takes, and ``--file-read`` one of the reads it offers.

        With ``--pipeline-cmd`` the entry is its ``--output``, and the command may use only that output's own
        placeholders; without, ``--output`` stays at its default (the bundled pipeline writes its ``--sink``).

        Raises: ``ConfigError`` for ``--sink``, ``--output``, ``--pipeline-cmd``, ``--workload`` or
        ``--file-read``, naming what fits.
        """
        if self.pipeline_python:
            self._check_pipeline_python()
        if not self.pipeline_cmd and self.output != user_outputs.DEFAULT:
            raise ConfigError("--output", "--output says what a --pipeline-cmd job writes; the bundled pipeline "
                                          "writes its --sink (e.g. --sink postgres): drop --output")
        if self.pipeline_cmd and not self.pipeline_python and self.output in user_outputs.OUTPUTS:
            self._check_output_jars()
        if self.pipeline_cmd and self.output in user_outputs.OUTPUTS:
            used = PipelineCommand.parse(self.pipeline_cmd).used
            wrong = user_outputs.misplaced(self.output, used)
            if wrong:
                raise ConfigError("--pipeline-cmd", "; ".join(f"{{{p}}} is for --output {o}" for p, o in wrong.items())
                                  + f", and this run reads --output {self.output}: pass the output your job writes")
        if self.sink not in sinks.SINKS or self.output not in user_outputs.OUTPUTS:
            return  # their checks report it
        sink = self.sink_entry
        if self.order_column and sink.name not in ORDERED_TABLES:
            raise ConfigError("--order-column", f"{sink.label} has no columns to order by: --order-column is for "
                                                f"--output {' or '.join(ORDERED_TABLES)}")
        if sink.output_dir and not backend.file_sinks:
            raise ConfigError("--sink", f"the {backend.name} backend cannot run {sink.label}; use --backend "
                              + ", ".join(n for n in registry.names() if registry.backend_class(n).file_sinks))
        if sink.database and sink.database not in getattr(backend, "databases", ()):
            raise ConfigError("--sink", f"the {backend.name} backend starts no {sink.database} server for "
                                        f"{sink.label}; use --backend "
                              + ", ".join(n for n in registry.names()
                                          if sink.database in getattr(registry.backend_class(n), "databases", ())))
        if sink.spark_runtime and not capabilities.implements(type(backend), Runtimes):
            raise ConfigError("--sink", f"{sink.label} runs on PySpark {sink.spark_runtime}, and the {backend.name} "
                                        f"backend runs one PySpark only; use --backend {runtime_backends()}")
        mode = workloads.get(self.workload).output_mode if self.workload in workloads.names() else None
        if mode is not None and mode not in sink.output_modes:
            others = " or ".join(s.name for s in sinks.entries() if mode in s.output_modes and not s.mutant)
            raise ConfigError("--workload", f"{sink.label} takes {' and '.join(sorted(sink.output_modes))} mode "
                                            f"only; the {self.workload} workload emits in {mode} mode: use --sink "
                                            f"{others} with it")
        if self.file_read not in sink.reads:
            with_it = " or ".join(s.name for s in sinks.entries() if self.file_read in s.reads)
            raise ConfigError("--file-read", f"only with --sink {with_it}" if with_it else
                              f"--sink {self.sink} reads {', '.join(sink.reads)} only")

    def _check_kafka_version(self, backend) -> None:
        """``--kafka-version`` needs a backend that starts its brokers on a chosen release
        (``picks_kafka_version``) and a release Maven Central serves: its jars are resolved here, once per
        version (about 12 s; ``~/.cache/onceproof/jars/kafka-<version>``), so a release that does not exist
        is refused before anything starts.

        Raises: ``ConfigError`` for ``--kafka-version`` naming the fix."""
        why = kafka_release_refusal(backend)
        if why:
            raise ConfigError("--kafka-version", why)
        try:
            jars.kafka_classpath(self.kafka_version)
        except jars.ResolveError as e:
            first = str(e).splitlines()[0]
            raise ConfigError("--kafka-version", f"Kafka {self.kafka_version} could not be resolved ({first}); "
                                                 f"choose a release Maven Central serves, from "
                                                 f"{jars.SUPPORTED_KAFKA}") from None

    def _check_upgrade(self, backend) -> None:
        """``rolling-upgrade`` and ``--kafka-upgrade-to`` go together; the release must not be older than the
        one the brokers start on, and Maven Central must serve it (resolved here, like ``--kafka-version``).

        Raises: ``ConfigError`` for ``--kafka-upgrade-to`` or ``--nemesis`` naming the fix."""
        rolling = any(f.partition(":")[0] == "rolling-upgrade" for f in self.nemesis)
        if not self.kafka_upgrade_to:
            if rolling:
                raise ConfigError("--nemesis", "rolling-upgrade needs the release to move to: add "
                                               "--kafka-upgrade-to X.Y.Z (docs/versions.md)")
            return
        if not rolling and not self.schedule:
            raise ConfigError("--kafka-upgrade-to", "only the rolling-upgrade fault upgrades the brokers: add it "
                                                    "to --nemesis, or drop --kafka-upgrade-to")
        why = kafka_release_refusal(backend, "--kafka-upgrade-to")
        if why:
            raise ConfigError("--kafka-upgrade-to", why)
        start = jars.kafka_version(self.kafka_version)
        if jars.version_tuple(self.kafka_upgrade_to) < jars.version_tuple(start):
            raise ConfigError("--kafka-upgrade-to", f"{self.kafka_upgrade_to} is older than the brokers' "
                                                    f"{start}: Kafka supports no downgrade of metadata.version; "
                                                    f"start older with --kafka-version")
        try:
            jars.kafka_classpath(self.kafka_upgrade_to)
            jars.kafka_tools_classpath(self.kafka_upgrade_to)
        except jars.ResolveError as e:
            first = str(e).splitlines()[0]
            raise ConfigError("--kafka-upgrade-to", f"Kafka {self.kafka_upgrade_to} could not be resolved "
                                                    f"({first}); choose a release Maven Central serves") from None

    def _check_spark_version(self, backend) -> None:
        """``--spark-version`` needs a backend that runs a second PySpark (``Runtimes``), no
        ``--pipeline-python`` (the job's interpreter has its own PySpark) and a sink whose writer has no
        PySpark of its own (``Sink.spark_runtime``, the Delta sinks') other than the one named; the release is
        chosen here (PyPI and Maven, :func:`spark_release.release`), so a name neither serves is refused
        before anything starts.

        Raises: ``ConfigError`` for ``--spark-version`` naming the fix."""
        if why := runtime_refusal(type(backend)):
            raise ConfigError("--spark-version", why)
        if self.pipeline_python:
            raise ConfigError("--spark-version", "--pipeline-python names your job's interpreter, whose PySpark "
                                                 "the job runs on: drop --spark-version")
        try:
            chosen = spark_release.release(self.spark_version)
        except spark_release.SparkReleaseError as e:
            raise ConfigError("--spark-version", str(e)) from None
        own = None if self.pipeline_cmd or self.sink not in sinks.SINKS else self.sink_entry.spark_runtime
        if own and own != chosen:
            raise ConfigError("--spark-version", f"{self.sink_entry.label} runs on PySpark {own} (its writer's "
                                                 f"library needs it), not {chosen}: drop --spark-version")

    def _check_output_jars(self) -> None:
        """A ``--pipeline-cmd`` job on onceproof's own interpreter runs on its PySpark, or on the release
        ``--spark-version`` names: the libraries its ``--output`` reaches through ``{jars}`` alone (Iceberg's
        runtime) must build for that Spark line (``interpreter.jars_only_refusal``).

        Raises: ``ConfigError`` for ``--output`` naming the lines and the options that choose one."""
        version = importlib.metadata.version("pyspark")
        if self.spark_version:
            try:
                version = spark_release.release(self.spark_version)
            except spark_release.SparkReleaseError:
                return  # --spark-version's own check names that
        why = interpreter.jars_only_refusal(sys.executable, version, user_outputs.get(self.output).entry().jars)
        if why:
            raise ConfigError("--output", why + ", or --spark-version with one of those lines")

    def _check_pipeline_python(self) -> None:
        """``--pipeline-python`` runs a ``--pipeline-cmd`` job, on a PySpark onceproof can resolve the Kafka
        connector for (:func:`onceproof.backends.common.interpreter.refusal`); asking the interpreter takes
        a second or two (it imports its pyspark).

        Raises: ``ConfigError`` for ``--pipeline-python`` naming the fix."""
        if not self.pipeline_cmd:
            raise ConfigError("--pipeline-python", "the bundled pipeline runs on onceproof's own PySpark; "
                                                   "--pipeline-python is for a --pipeline-cmd job: drop it")
        try:
            i = interpreter.probe(os.path.expanduser(self.pipeline_python))
            why = interpreter.refusal(i)
            if not why and self.output in user_outputs.OUTPUTS:
                why = interpreter.deps_refusal(i, user_outputs.get(self.output).entry().jars)
        except interpreter.InterpreterError as e:
            why = str(e)
        if why:
            raise ConfigError("--pipeline-python", why)

    def check_fault(self, spec: str) -> None:
        """One fault (``name`` or ``name:target``), injected by hand into a running session, checked as
        ``--nemesis`` would check it on this run: a known fault and target, one the backend can perform and
        the sink can take.

        Raises: ``ConfigError`` for ``--nemesis`` naming why and what to ask for instead."""
        try:
            catalog.parse(spec)
        except ValueError as e:
            raise ConfigError("--nemesis", str(e)) from None
        dataclasses.replace(self, nemesis=[spec], schedule="")._check_capabilities()

    def _check_capabilities(self) -> None:
        """Every fault (every target of a fault given without one) must be in the backend's capabilities,
        and every explicitly requested fault must be one the sink can take (its entry's capabilities; ``all``
        leaves those out instead, :attr:`faults`).

        Raises: ``ConfigError`` for ``--nemesis`` naming the backend or the sink and the faults it cannot
        perform, and what to ask for instead.
        """
        backend = self.backend_instance()
        self._check_sink_fits(backend)
        if self.kafka_version:
            self._check_kafka_version(backend)
        self._check_upgrade(backend)
        if self.warm_cluster and not backend.warm_clusters:
            raise ConfigError("--warm-cluster", f"the {backend.name} backend keeps no warm cluster: leave "
                                                "--warm-cluster out, or use --backend local")
        if self.spark_version:
            self._check_spark_version(backend)
        elif "upgrade:spark-version" in self.faults:
            raise ConfigError("--nemesis", "upgrade:spark-version moves the query to the Spark line after the one it "
                                           "starts on, and onceproof's own is the newest: start it on an older "
                                           "line with --spark-version (3.5, 4.2; docs/versions.md)")
        if self.pipeline_cmd:
            if not backend.user_pipelines:
                raise ConfigError("--pipeline-cmd", f"the {backend.name} backend runs the bundled pipeline only; "
                                  "use --backend " + ", ".join(n for n in registry.names()
                                                               if registry.backend_class(n).user_pipelines))
            if self.sink != self.default_of(self._field("sink")):
                raise ConfigError("--sink", "--sink chooses the bundled pipeline's sink; a --pipeline-cmd pipeline "
                                  "brings its own: drop --sink")
            if self.workload != self.default_of(self._field("workload")):
                raise ConfigError("--workload", "a --pipeline-cmd pipeline is checked as the keyed workload (its "
                                  "contract, docs/pipeline-contract.md): drop --workload")
        if not catalog.is_all(self.nemesis) or self.schedule:
            caps = self.sink_capabilities
            for spec in self.faults:
                fits = catalog.for_sink(catalog.expand(spec), caps)[0]
                if not fits:  # a fault without a target only draws the targets that fit (target_choices)
                    missing = sorted(catalog.sink_needs(spec) - caps)
                    fix = ("Drop it: onceproof cannot reach inside a --pipeline-cmd pipeline's sink"
                           if self.pipeline_cmd else "Drop it, or use a sink that has it: " + ", ".join(
                               s.name for s in sinks.entries() if set(missing) <= s.capabilities))
                    raise ConfigError("--nemesis", f"{spec} cannot hit {self.sink_label}: it has no "
                                      f"{self._lacks(missing)}. {fix}")
        for spec in self.faults:
            missing = [s for s in catalog.expand(spec) if not can_perform(backend.capabilities, s)]
            if missing:
                raise ConfigError("--nemesis", f"the {backend.name} backend cannot perform {spec}"
                                  + (f" ({', '.join(missing)})" if missing != [spec] else "")
                                  + f"; it can: {', '.join(sorted(backend.capabilities)) or 'no faults'}")

    def fault_plan(self) -> list[tuple[float, str]]:
        """The seeded fault schedule ``[(at_s, spec)]``, sized by the faults' expected durations
        (``onceproof.nemesis.catalog.expected_s``) so that one turn of every spec fits the run.

        With ``--schedule``, the file's faults at its times (:func:`read_schedule`), as they are.

        Raises: ``onceproof.nemesis.schedule.PlanDoesNotFit`` naming the minimum ``--time-limit``.
        """
        if self.schedule:
            return [(f["at_s"], f["f"]) for f in read_schedule(self.schedule)]
        return schedule.plan(self.faults, self.nemesis_interval, self.time_limit, self.seed,
                             targets=self.target_choices(), max_run_factor=self.max_run_factor,
                             durations=lambda s: catalog.expected_s(s, hold_s=self.fault_hold,
                                                                    txn_timeout_ms=self.txn_timeout_ms))

    def rng_keys(self) -> list[str | None] | None:
        """Per planned fault, the key of the RNG that picks its target (``--schedule`` files carry the
        original run's, so a shrunk schedule hits the same brokers and partitions); ``None`` without
        ``--schedule`` (``nemesis/runner.py`` keys by seed and position)."""
        return [f["rng"] for f in read_schedule(self.schedule)] if self.schedule else None

    def fault_holds(self) -> list[float | None] | None:
        """Per planned fault, its own hold (s) when the ``--schedule`` file gives one (a session's
        ``--for``), else ``None`` (``--fault-hold``); ``None`` without ``--schedule``."""
        return [f["hold_s"] for f in read_schedule(self.schedule)] if self.schedule else None

    # ------------------------------------------------------------------ replay
    def option_text(self, f: dataclasses.Field) -> list[str]:
        """The command-line words that set field ``f`` to this config's value."""
        v = getattr(self, f.name)
        flag = self.flag(f)
        if isinstance(v, bool):
            return [flag] if v else ["--no-" + flag[2:]]
        if f.metadata.get("fmt"):
            return [flag, f.metadata["fmt"](v)]
        if isinstance(v, float):
            s = repr(v)
            return [flag, s[:-2] if s.endswith(".0") else s]
        return [flag, str(v)]

    def replay_command(self) -> str:
        """The command line that replays this run: ``onceproof run`` with every option whose value differs
        from its default, and the options marked ``always`` (sink, faults, seed, ...), shell-quoted.
        Parsing it back (``onceproof.harness.cli.parse_run_args``) gives this config, but for the options that
        say where it ran (``replayed=False``: ``--warm-cluster``). A ``--pipeline-cmd``
        run leaves ``--sink`` out at its default: no bundled sink runs, the job brings its own."""
        parts = ["onceproof", "run"]
        for f in self.options():
            at_default = getattr(self, f.name) == self.default_of(f)
            if (f.name == "sink" and self.pipeline_cmd and at_default) or not f.metadata.get("replayed", True):
                continue
            if f.metadata.get("always") or not at_default:
                parts += self.option_text(f)
        return shlex.join(parts)
