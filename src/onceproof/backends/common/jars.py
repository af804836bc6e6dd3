"""Resolve the Kafka broker classpath and Spark's Kafka connector from Maven Central, once, into a cache.

The poms live in ``onceproof/deps/`` (package data); Maven copies the resolved jars into
``$ONCEPROOF_CACHE`` (default ``~/.cache/onceproof``) ``/jars/<name>-<version>/``. A directory that
holds a ``.complete`` stamp is reused without touching the network. ``KAFKA_HOME`` (an official
distribution) replaces the Maven-resolved broker classpath when set.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from onceproof.backends.cache import cache_dir
from onceproof.checkout import DEPS

log = logging.getLogger("onceproof.jars")


class ResolveError(RuntimeError):
    """Maven could not resolve a classpath (network, missing artifact, no ``mvn``)."""


class NotServed(ResolveError):
    """Maven reached its repository, which does not have the artifact at that version."""


_NOT_SERVED = re.compile(r"was not found in|Could not find artifact|could not be resolved: .*\(absent\)")
"""Maven 3.8–3.9's words for an artifact its repository does not have (not a network failure)."""


@dataclass(frozen=True)
class Classpath:
    """A resolved set of jars. ``version`` is the pinned version of the main artifact."""

    name: str
    version: str
    jars: tuple[Path, ...]

    def as_java(self) -> str:
        """The jars joined with ``:`` for ``java -cp``."""
        return ":".join(str(j) for j in self.jars)


def _pom_property(pom: Path, prop: str) -> str:
    m = re.search(rf"<{prop}>([^<]+)</{prop}>", pom.read_text())
    if not m:
        raise ResolveError(f"{pom} has no <{prop}>")
    return m.group(1)


def _resolve(name: str, version: str, pom: Path, properties: dict[str, str] | None = None) -> Classpath:
    """Resolve ``pom`` (with ``properties`` given to Maven as ``-Dkey=value``, overriding the pom's) into
    the cache once; ``version`` names the cache directory."""
    target = cache_dir() / "jars" / f"{name}-{version}"
    stamp = target / ".complete"
    if not stamp.exists():
        if shutil.which("mvn") is None:
            raise ResolveError("`mvn` is not on PATH: install Maven 3.8+ (apt-get install maven)")
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={tmp}", *(f"-D{k}={v}" for k, v in (properties or {}).items())]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            kind = NotServed if _NOT_SERVED.search(proc.stdout + proc.stderr) else ResolveError
            raise kind(
                f"Maven could not resolve {name} {version} (exit {proc.returncode}).\n"
                f"Command: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}\n"
                "Check network access to Maven Central, or set KAFKA_HOME to a Kafka distribution.")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        stamp.write_text(version)
    jars = tuple(sorted(target.glob("*.jar")))
    if not jars:
        raise ResolveError(f"{target} holds no jars; delete it and retry")
    return Classpath(name, version, jars)


KAFKA_VERSION_ENV = "ONCEPROOF_KAFKA_VERSION"
"""Names another Apache Kafka broker version to resolve from Maven Central instead of the pinned one (e.g.
``3.9.1``, a broker without KIP-890 part 2, for ``make probe-kafka17754``); unset: the pin. The default of
``--kafka-version`` (an alias kept for scripts and ``make`` variables)."""

OLDEST_KAFKA = (3, 5)
"""The oldest Apache Kafka line a cluster onceproof starts may run: KRaft became production-ready in 3.3
(KIP-833), and 3.5 is the oldest line whose brokers take this harness's configuration unchanged (a static
``controller.quorum.voters``, ``kafka.tools.StorageTool format --cluster-id``; docs/versions.md)."""
NEWEST_KAFKA_MAJOR = 4
"""The newest Kafka major version accepted (4.x: Maven Central serves up to 4.4.0 on 2026-11-25)."""
SUPPORTED_KAFKA = f"{OLDEST_KAFKA[0]}.{OLDEST_KAFKA[1]}.0 to {NEWEST_KAFKA_MAJOR}.x"
"""The supported range, as error messages and docs name it."""


def pinned_kafka_version() -> str:
    """The version ``deps/kafka/pom.xml`` pins (the default broker, and the command-line tools' version)."""
    return _pom_property(DEPS / "kafka" / "pom.xml", "kafka.version")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"4.1.1"`` → ``(4, 1, 1)``; the digits of each dotted part (``"4.0.0-rc1"`` → ``(4, 0, 0)``). Pure."""
    return tuple(int(re.match(r"\d*", p).group() or 0) for p in version.split("."))


def kafka_version_problem(version: str) -> str | None:
    """Why ``version`` cannot be a broker version (not ``X.Y.Z``, or outside :data:`SUPPORTED_KAFKA`), or
    ``None``. Whether Maven Central serves it is learned when its jars are resolved."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        return f"{version!r} is not an Apache Kafka release such as 3.9.1 or 4.1.1"
    major, minor, _ = (int(x) for x in version.split("."))
    if (major, minor) < OLDEST_KAFKA or major > NEWEST_KAFKA_MAJOR:
        return f"Kafka {version} is outside the supported range, {SUPPORTED_KAFKA} (KRaft brokers only)"
    return None


def kafka_version(wanted: str = "") -> str:
    """The Apache Kafka broker version: ``wanted`` when given (``--kafka-version``), else
    ``$ONCEPROOF_KAFKA_VERSION`` when set, else the pin (``deps/kafka/pom.xml``).

    Raises: ``ResolveError`` when ``wanted`` or the variable is not a version (digits and dots)."""
    for value, name, fix in ((wanted, "--kafka-version ", ""),
                             (os.environ.get(KAFKA_VERSION_ENV, ""), f"{KAFKA_VERSION_ENV}=",
                              "; unset it to use the pinned one")):
        value = value.strip()
        if value:
            if not re.fullmatch(r"\d+(\.\d+){1,3}", value):
                raise ResolveError(f"{name}{value!r} is not a Kafka version such as 3.9.1{fix}")
            return value
    return pinned_kafka_version()


def kafka_classpath(version: str = "") -> Classpath:
    """Broker classpath: ``$KAFKA_HOME/libs`` when set, else Maven-resolved ``kafka_2.13`` + log4j2 at
    :func:`kafka_version` ``(version)`` (cached per version: about 12 s the first time).

    Raises: ``ResolveError`` when neither works (a version Maven Central does not serve included).
    """
    home = os.environ.get("KAFKA_HOME")
    if home:
        libs = sorted(Path(home, "libs").glob("*.jar"))
        if not libs:
            raise ResolveError(f"KAFKA_HOME={home} has no libs/*.jar; unset it to use Maven")
        ver = next((m.group(1) for j in libs if (m := re.match(r"kafka_2\.13-(.+)\.jar$", j.name))), "?")
        return Classpath("kafka", ver, tuple(libs))
    version = kafka_version(version)
    return _resolve("kafka", version, DEPS / "kafka" / "pom.xml", {"kafka.version": version})


def kafka_tools_classpath(version: str = "") -> Classpath:
    """Kafka's command-line tools (``kafka-tools``: ``org.apache.kafka.tools.reassign.ReassignPartitionsCommand``
    and the others of the distribution's ``bin/kafka-*.sh``) at the broker's pinned version
    (``deps/kafka-tools/pom.xml``), whatever version the brokers run: that class exists from 3.7 on, and
    its admin requests (AlterPartitionReassignments, KIP-455, Kafka 2.4) are answered by every supported
    broker. Resolved on first use (about 15 s, 82 jars); ``$KAFKA_HOME/libs`` when set (a distribution
    ships them). ``version`` names another release's tools (``rolling-upgrade`` finalizes a newer release's
    ``metadata.version`` with that release's ``FeatureCommand``, which knows its levels; 3.6 or newer).

    Raises: ``ResolveError``.
    """
    if os.environ.get("KAFKA_HOME"):
        return kafka_classpath()
    version = version or pinned_kafka_version()
    return _resolve("kafka-tools", version, DEPS / "kafka-tools" / "pom.xml", {"kafka.version": version})


def java_binary() -> str:
    """``$JAVA_HOME/bin/java``, else the ``java`` on ``PATH``.

    Raises: ``ResolveError`` naming the fix when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ResolveError("no `java` found: install Java 17+ or set JAVA_HOME")
    return str(java)


def connector_version(spark_version: str | None = None) -> str:
    """The ``spark-sql-kafka-0-10_2.13`` version for a PySpark at ``spark_version``: the pinned one
    (``deps/spark-kafka/pom.xml``) for that Spark minor or a newer one (``None``: this interpreter's), the
    Spark's own version for an older minor, whose Spark cannot load a newer connector's classes."""
    pinned = _pom_property(DEPS / "spark-kafka" / "pom.xml", "spark.kafka.version")
    if spark_version is None:
        return pinned
    return pinned if major_minor(spark_version) >= major_minor(pinned) else spark_version


def major_minor(version: str) -> tuple[int, int]:
    """``(4, 2)`` for ``"4.2.0"`` or ``"4.2.0.dev1"``; a missing part is 0."""
    major, minor = (re.findall(r"\d+", version) + ["0", "0"])[:2]
    return int(major), int(minor)


def spark_kafka_classpath(pyspark_jars: Path | None = None, spark_version: str | None = None) -> Classpath:
    """Spark's Kafka connector jars for a PySpark at ``spark_version`` (:func:`connector_version`; ``None``:
    this interpreter's), minus artifacts that PySpark already ships (the one whose ``pyspark/jars`` is
    ``pyspark_jars``; default: this interpreter's).

    Raises: ``ResolveError``.
    """
    pom = DEPS / "spark-kafka" / "pom.xml"
    version, props, label = _connector(spark_version)
    cp = _resolve("spark-sql-kafka", version + label, pom, {"spark.kafka.version": version, **props})
    return _minus_shipped(Classpath(cp.name, version, cp.jars), pyspark_jars)


def served_connector(spark_version: str) -> str:
    """The ``spark-sql-kafka-0-10`` version a PySpark at ``spark_version`` runs with: :func:`connector_version`,
    stepped down to a patch Maven serves (:func:`served_patch`), e.g. ``"3.5.7"`` for ``"3.5.9"`` here.

    Raises: ``ResolveError``."""
    return _connector(spark_version)[0]


def _connector(spark_version: str | None) -> tuple[str, dict[str, str], str]:
    """``(served version, Maven properties, cache label)`` of the connector for ``spark_version``."""
    pom = DEPS / "spark-kafka" / "pom.xml"
    wanted = connector_version(spark_version)
    major = major_minor(wanted)[0]
    props, label = {}, ""
    if major < 4:  # Spark 3.5: the Scala 2.12 builds (onceproof's Spark lines: SPARK_LINES)
        props, label = {"scala.binary": SCALA[major], "spark.token.version": SPARK35_TOKEN}, f"-scala{SCALA[major]}"
    return served_patch("spark-sql-kafka", wanted, pom, "spark.kafka.version", props, label), props, label


SPARK_LINES = "3.5 and 4.x"
"""The Spark lines a job may run on, as messages name them: 4.x (Scala 2.13, the connector
``spark-sql-kafka-0-10_2.13``) and 3.5 (Scala 2.12, the ``_2.12`` builds: PyPI's pyspark 3.5 wheels
ship Scala 2.12 jars, spark.apache.org/docs/3.5.0, "Downloading")."""
SCALA = {3: "2.12", 4: "2.13"}
"""The Scala binary version of the Kafka connector resolved for a job, by its Spark major version (the
pom's ``scala.binary``; the pom's default is 4's)."""
SPARK35_TOKEN = "3.5.4"
"""``spark-token-provider-kafka-0-10_2.12`` for a Spark 3.5 job's connector: Maven Central, as served here
on 2026-11-29, has it at 3.5.4 (and the connector's _2.12 builds at 3.5.3 and 3.5.7, not 3.5.8-3.5.9)."""


def served_patch(name: str, version: str, pom: Path, prop: str, props: dict[str, str] | None = None,
                 label: str = "") -> str:
    """``version`` (``"4.1.4"``) when Maven serves ``pom`` at it (``prop`` set to it), else the newest
    older patch of the same line that it serves (``"4.1.3"``): PyPI can carry a PySpark patch before
    Maven Central carries its connector, and a patch of a line keeps the line's binary interface. The
    answer is remembered in the cache (``jars/<name>-<version><label>.served``), so Maven is asked once.
    ``props``: more Maven properties (a Scala build); ``label``: their part of the cache directory's name.

    Raises: ``ResolveError`` when no patch down to ``.0`` is served, or Maven fails otherwise."""
    memo = cache_dir() / "jars" / f"{name}-{version}{label}.served"
    if memo.is_file():
        return memo.read_text().strip()
    parts = version_tuple(version)
    for patch in range(parts[2] if len(parts) > 2 else 0, -1, -1):
        candidate = f"{parts[0]}.{parts[1]}.{patch}"
        try:
            _resolve(name, candidate + label, pom, {prop: candidate, **(props or {})})
        except NotServed:
            continue
        if candidate != version:
            memo.parent.mkdir(parents=True, exist_ok=True)
            memo.write_text(candidate)
            log.warning("Maven serves no %s %s: using %s, the newest patch of its line that it serves",
                        name, version, candidate)
        return candidate
    raise ResolveError(f"Maven serves no {name} on the {parts[0]}.{parts[1]} line up to {version}: "
                       f"run the job on a PySpark whose line Maven Central carries ({pom})")


def spark_lines(name: str) -> list[str]:
    """The Spark lines (``["4.0", "4.1", "4.2"]``) ``deps/<name>/pom.xml`` builds for (its
    ``<name.spark.lines>``), or ``[]`` when it is not built per Spark line (or has no pom)."""
    pom = DEPS / name / "pom.xml"
    if not pom.is_file() or f"<{name}.spark.lines>" not in pom.read_text():
        return []
    return _pom_property(pom, f"{name}.spark.lines").split(",")


class NoBuildForSpark(ResolveError):
    """A ``deps/`` library has no build for the Spark line asked (its pom's ``<name.spark.lines>``)."""


def spark_line(name: str, spark_version: str) -> str | None:
    """The Spark line (``"4.2"``) whose build of ``deps/<name>`` a PySpark at ``spark_version`` needs, or
    ``None`` when the library is not built per Spark line (:func:`spark_lines` is empty).

    Raises: :class:`NoBuildForSpark` when the library builds for other lines only."""
    lines = spark_lines(name)
    if not lines:
        return None
    line = "{}.{}".format(*major_minor(spark_version))
    if line not in lines:
        raise NoBuildForSpark(f"{name} has no build for Spark {line} (it builds for Spark {', '.join(lines)}; "
                              f"{DEPS / name / 'pom.xml'})")
    return line


def deps_classpath(name: str, pyspark_jars: Path | None = None, spark_version: str | None = None,
                   version: str | None = None) -> Classpath:
    """The classpath of ``deps/<name>/pom.xml``, e.g. ``"delta"``: Delta Lake's Spark connector for the
    bundled Delta sinks (``Sink.jars``) and a user's ``--output delta`` job, minus what the PySpark whose
    ``pyspark/jars`` is ``pyspark_jars`` (default: this interpreter's) ships.

    A pom built per Spark line (an artifact named ``..._<major.minor>_2.13``) has the properties
    ``<name.spark>`` (the line it pins) and ``<name.spark.lines>`` (every line the library builds for);
    ``spark_version`` (``"4.1.1"``) then picks that line's build, and ``version`` overrides
    ``<name.version>`` (a job's own delta-spark package must match its jars). Without them the pom is
    resolved as pinned. The cache directory is named by version and line.

    Raises: :class:`NoBuildForSpark` when ``spark_version``'s line is not in ``<name.spark.lines>``;
    ``ResolveError`` (also for a name with no pom, or a version Maven cannot find).
    """
    pom = DEPS / name / "pom.xml"
    if not pom.is_file():
        raise ResolveError(f"no classpath named {name!r}: {pom} is missing")
    line = spark_line(name, spark_version) if spark_version is not None else None
    per_line = _line_properties(pom, name, line) if line is not None else {}
    line_version = per_line.pop(f"{name}.version", None)
    props = {f"{name}.version": version or line_version or _pom_property(pom, f"{name}.version"), **per_line}
    label = props[f"{name}.version"]
    if line is not None:
        props[f"{name}.spark"] = line
        label = f"{label}-spark{line}"
    return _minus_shipped(_resolve(name, label, pom, props), pyspark_jars)


def _line_properties(pom: Path, name: str, line: str) -> dict[str, str]:
    """The pom's properties for one Spark line: ``<name.key.<line>>`` as ``{"name.key": value}`` (e.g.
    ``<iceberg.version.4.0>1.11.0</iceberg.version.4.0>``: Iceberg's last build for Spark 4.0 is older
    than its pin; ``<iceberg.scala.3.5>``: Spark 3.5's builds are Scala 2.12). Pure but for the read."""
    found = re.findall(rf"<({re.escape(name)}\.[a-z]+)\.{re.escape(line)}>([^<]+)</", pom.read_text())
    return dict(found)


def _minus_shipped(cp: Classpath, pyspark_jars: Path | None) -> Classpath:
    """``cp`` without the artifacts (any version) that the PySpark in ``pyspark_jars`` ships: Spark's own
    Scala, Hadoop and Jackson win over a connector's."""
    shipped = {_artifact(j.name) for j in (pyspark_jars or pyspark_jars_dir()).glob("*.jar")}
    return Classpath(cp.name, cp.version, tuple(j for j in cp.jars if _artifact(j.name) not in shipped))


def pyspark_jars_dir() -> Path:
    """``<site-packages>/pyspark/jars`` of the running interpreter."""
    import pyspark  # lazy: pyspark is heavy; the checkers and the docker backend import this module without it

    return Path(pyspark.__file__).parent / "jars"


def _artifact(jar_name: str) -> str:
    """``lz4-java-1.8.0.jar`` → ``lz4-java``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar_name)
