"""``cluster.toml``: a running cluster that onceproof must not install or own (``--backend external``,
issue 28, design §4.2), as frozen data. Reading the file (and the secrets it names) is the only I/O.

The schema (a worked example for the repository's ``docker-compose.yml`` is ``examples/cluster.toml``)::

    [kafka]            bootstrap (the harness's clients), topic_prefix = "onceproof-"
    [kafka.security]   protocol, mechanism, username, password_env | password_file, ca_file (kafka_config)
    [kafka.brokers]    <node.id> = { host = "kafka1", ... }: facts the broker faults' templates may use
    [spark]            bootstrap (the pipeline's, from inside the cluster), master, master_ui, jars_dir,
                       submit (the template that starts one driver incarnation)
    [spark.files]      mode = "mounted", harness_path, cluster_path (the run's files, seen from both sides)
    [vars]             user placeholders for every template
    [faults.<fault>]   run, heal, where, timeout_s, shell (``fault_map``)

Safety rules checked here: no secret is written in the file (``secrets.check_secret_keys``: a password
is ``password_env``/``password_file``); the topic prefix is not empty, so a run's topics, consumer
groups and transactional ids are ``<topic_prefix><run8>-...`` and never a name the cluster already has
(``topic_names``).

Errors: :class:`ClusterFileError` (a ``ValueError``) whose message starts with ``<file>: <key>`` and
names the fix; the CLI turns it into exit 254.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from onceproof.backends.external.fault_map import COMMON, Command, FaultMap, FaultMapError, placeholders, render
from onceproof.kafka_config import KafkaConfigError, KafkaSecurity
from onceproof.secrets import SecretKeyError, check_secret_keys
from onceproof.topic_names import TopicNameError, TopicNames

DEFAULT_PREFIX = "onceproof-"
"""The default ``[kafka] topic_prefix``."""

SUBMIT_PLACEHOLDERS = COMMON + ("incarnation", "job_args")
"""Built-in placeholders of ``[spark] submit``: the run's id and prefix, the driver incarnation (1, 2,
...) and the job's arguments (``python -m onceproof.job`` takes them; shell-quoted, one string)."""

TABLES = {"kafka", "spark", "vars", "faults"}
KAFKA_KEYS = {"bootstrap", "topic_prefix", "security", "brokers"}
SPARK_KEYS = {"bootstrap", "master", "master_ui", "jars_dir", "submit", "files"}
FILES_KEYS = {"mode", "harness_path", "cluster_path"}
FILE_MODES = ("mounted",)
"""How the run's files (control switches, ``sink.jsonl``, the checkpoint) reach both sides: ``mounted``
(one directory seen by the harness at ``harness_path`` and by the driver and executors at
``cluster_path``). The SSH relay (design §2.6) is the planned second mode."""


class ClusterFileError(ValueError):
    """``cluster.toml`` is unreadable or breaks a rule; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class KafkaTarget:
    """``[kafka]``: how the harness reaches the cluster's Kafka.

    Attributes:
        bootstrap: ``host:port,...`` for the harness's own clients.
        topic_prefix: the start of every name a run makes (never empty).
        security: ``[kafka.security]`` (PLAINTEXT when absent); holds the password as a ``Secret``.
        brokers: ``{node.id: {field: value}}`` from ``[kafka.brokers]``.
    """

    bootstrap: str
    topic_prefix: str = DEFAULT_PREFIX
    security: KafkaSecurity = KafkaSecurity()
    brokers: Mapping[int, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SparkTarget:
    """``[spark]``: how a driver incarnation is started in the cluster.

    Attributes:
        bootstrap: the Kafka bootstrap the pipeline uses from inside the cluster.
        master: the master URL the job gets (``spark://``, ``yarn``, ``k8s://``).
        master_ui: the standalone master's web UI (its ``/json`` lists applications: evidence), or "".
        jars_dir: where the Kafka connector's jars are inside the cluster ("" = ship them with ``--jars``).
        submit: the template that starts one driver and lives as long as it does.
        harness_path / cluster_path: the run's files as the harness sees them and as the cluster does.
    """

    bootstrap: str
    master: str
    submit: str
    harness_path: Path
    cluster_path: PurePosixPath
    master_ui: str = ""
    jars_dir: str = ""

    def cluster_side(self, local: Path) -> PurePosixPath:
        """``local`` (a path under ``harness_path``) as the driver and executors see it.

        Raises: :class:`ClusterFileError` when ``local`` is outside ``harness_path``."""
        try:
            rel = Path(local).resolve().relative_to(self.harness_path.resolve())
        except ValueError:
            raise ClusterFileError(f"{local}: the run directory must be under spark.files.harness_path "
                                   f"({self.harness_path}); pass --results-dir below it") from None
        return self.cluster_path.joinpath(*rel.parts)

    def submit_command(self, values: Mapping[str, object], job_args: list[str]) -> Command:
        """The ``submit`` template rendered into the command that starts one driver incarnation: each of
        ``values`` ``shlex.quote``-d, ``{job_args}`` the job's arguments joined as a shell would read them
        (so they stay separate arguments), then split into argv (no shell).

        Raises: :class:`ClusterFileError` when a placeholder has no value."""
        try:
            argv = render(self.submit, values, raw={"job_args": shlex.join(job_args)}, where="spark.submit")
        except FaultMapError as e:
            raise ClusterFileError(str(e)) from None
        return Command(argv=argv, where="local", timeout_s=0.0)


@dataclass(frozen=True)
class ClusterFile:
    """The whole file.

    Attributes:
        path: the file read (for messages and ``test.json``).
        kafka / spark: the two sections.
        faults: the fault map (its ``specs()`` are the faults a run may plan).
        variables: ``[vars]``.
    """

    path: Path
    kafka: KafkaTarget
    spark: SparkTarget
    faults: FaultMap
    variables: Mapping[str, str] = field(default_factory=dict)

    def topic_names(self, run_id: str) -> TopicNames:
        """The run's topics: ``<topic_prefix><first 8 characters of run_id>-input`` etc."""
        return TopicNames(self.run_prefix(run_id))

    def run_prefix(self, run_id: str) -> str:
        """``<topic_prefix><run8>-``: the start of the run's topics, groups and transactional ids."""
        return f"{self.kafka.topic_prefix}{run_id[:8]}-"


def _str(d: Mapping, key: str, where: str, *, default: str | None = None) -> str:
    v = d.get(key, default)
    if not isinstance(v, str) or (default is None and not v.strip()):
        raise ClusterFileError(f"{where}.{key}: expected a non-empty string, got {v!r}")
    return v


def _table(d: Mapping, key: str, where: str, known: set[str] | None = None) -> Mapping:
    v = d.get(key, {})
    if not isinstance(v, Mapping):
        raise ClusterFileError(f"{where}.{key}: expected a table [{key}]")
    if known is not None:
        bad = sorted(set(v) - known)
        if bad:
            raise ClusterFileError(f"{where}.{key}.{bad[0]}: unknown key; known: {', '.join(sorted(known))}")
    return v


def _brokers(t: Mapping, where: str) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for k, v in t.items():
        try:
            bid = int(k)
        except ValueError:
            raise ClusterFileError(f"{where}.{k}: a broker's node.id (an integer), e.g. 1 = {{ host = \"kafka1\" }}"
                                   ) from None
        if not isinstance(v, Mapping) or not all(isinstance(x, str | int) for x in v.values()):
            raise ClusterFileError(f"{where}.{k}: expected a table of strings, e.g. {{ host = \"kafka1\" }}")
        out[bid] = {str(f): str(x) for f, x in v.items()}
    return out


def parse(data: Mapping, path: Path, *, env: Mapping[str, str] | None = None) -> ClusterFile:
    """A :class:`ClusterFile` from ``cluster.toml``'s parsed content; relative paths are taken from
    ``path``'s directory, secrets from ``env`` (default ``os.environ``).

    Raises: :class:`ClusterFileError` (see the module docstring for the rules)."""
    f = str(path)
    base = path.parent
    try:
        check_secret_keys(data)
    except SecretKeyError as e:
        raise ClusterFileError(f"{f}: {e}") from None
    bad = sorted(set(data) - TABLES)
    if bad:
        raise ClusterFileError(f"{f}: {bad[0]}: unknown table; known: {', '.join(sorted(TABLES))}")

    k = _table(data, "kafka", f"{f}:", KAFKA_KEYS)
    prefix = k.get("topic_prefix", DEFAULT_PREFIX)
    if not isinstance(prefix, str) or not prefix:
        raise ClusterFileError(f"{f}: kafka.topic_prefix: may not be empty on a cluster onceproof does not own "
                               f"(default {DEFAULT_PREFIX!r}); a run's topics start with it")
    try:
        TopicNames(prefix + "00000000-")
    except TopicNameError as e:
        raise ClusterFileError(f"{f}: kafka.topic_prefix: {e}") from None
    try:
        security = KafkaSecurity.from_mapping(_table(k, "security", f"{f}: kafka"), env=env, base_dir=base)
    except (KafkaConfigError, ValueError) as e:
        raise ClusterFileError(f"{f}: {e}") from None
    brokers = _brokers(_table(k, "brokers", f"{f}: kafka"), f"{f}: kafka.brokers")
    kafka = KafkaTarget(bootstrap=_str(k, "bootstrap", f"{f}: kafka"), topic_prefix=prefix, security=security,
                        brokers=brokers)

    variables = _table(data, "vars", f"{f}:")
    if not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in variables.values()):
        raise ClusterFileError(f"{f}: vars: expected strings or numbers, e.g. project = \"onceproof-ext\"")
    variables = {str(a): str(b) for a, b in variables.items()}

    s = _table(data, "spark", f"{f}:", SPARK_KEYS)
    files = _table(s, "files", f"{f}: spark", FILES_KEYS)
    mode = files.get("mode", "mounted")
    if mode not in FILE_MODES:
        raise ClusterFileError(f"{f}: spark.files.mode: one of {', '.join(FILE_MODES)}, got {mode!r}")
    harness = Path(os.path.expanduser(_str(files, "harness_path", f"{f}: spark.files")))
    harness = harness if harness.is_absolute() else base / harness
    cluster = PurePosixPath(_str(files, "cluster_path", f"{f}: spark.files"))
    if not cluster.is_absolute():
        raise ClusterFileError(f"{f}: spark.files.cluster_path: an absolute path inside the cluster, "
                               f"got {str(cluster)!r}")
    submit = _str(s, "submit", f"{f}: spark")
    allowed = set(SUBMIT_PLACEHOLDERS) | set(variables)
    try:
        names = placeholders(submit, "spark.submit")
    except FaultMapError as e:
        raise ClusterFileError(f"{f}: {e}") from None
    unknown = sorted(names - allowed)
    if unknown:
        raise ClusterFileError(f"{f}: spark.submit: unknown placeholder {{{unknown[0]}}}; known: "
                               f"{', '.join('{' + n + '}' for n in sorted(allowed))}")
    if "job_args" not in names:
        raise ClusterFileError(f"{f}: spark.submit: must pass {{job_args}} to the job, e.g. "
                               "\"spark-submit ... -m onceproof.job {job_args}\"")
    spark = SparkTarget(bootstrap=_str(s, "bootstrap", f"{f}: spark"), master=_str(s, "master", f"{f}: spark"),
                        submit=submit, harness_path=harness, cluster_path=cluster,
                        master_ui=_str(s, "master_ui", f"{f}: spark", default=""),
                        jars_dir=_str(s, "jars_dir", f"{f}: spark", default=""))

    fields = frozenset(x for b in brokers.values() for x in b)
    try:
        faults = FaultMap.parse(_table(data, "faults", f"{f}:"), variables=variables, broker_fields=fields)
    except FaultMapError as e:
        raise ClusterFileError(f"{f}: {e}") from None
    return ClusterFile(path=path, kafka=kafka, spark=spark, faults=faults, variables=variables)


def load(path: Path | str, *, env: Mapping[str, str] | None = None) -> ClusterFile:
    """Read and check ``cluster.toml`` at ``path``.

    Raises: :class:`ClusterFileError` when the file is missing, not TOML, or breaks a rule."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ClusterFileError(f"{p}: no such file; give --cluster a cluster.toml (examples/cluster.toml "
                               "shows one)") from None
    except tomllib.TOMLDecodeError as e:
        raise ClusterFileError(f"{p}: not TOML: {e}") from None
    return parse(data, p, env=env)
