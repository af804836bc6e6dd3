"""Which PySpark release ``--spark-version`` names: a line (``3.5``, ``3.5.x``) or a full release (``3.5.7``),
for the bundled pipeline, its sinks and its mutants, run in a cached runtime (``backends/local/runtimes.py``).

A line picks its newest patch that both PyPI (the ``pyspark`` package) and Maven Central (the
``spark-sql-kafka-0-10`` connector of the same patch, Scala 2.12 for 3.5 and 2.13 for 4.x) serve, so that
the driver's Spark and its Kafka source are one release. When Maven serves no connector of any of the
line's patches at the same version (a line newer than every connector, such as 4.3 on 2026-11-29), the
line's newest PyPI patch runs with the connector ``jars.served_connector`` gives it, and the log says so.

PyPI's releases are listed with ``pip index versions pyspark`` (the harness's pip, so a user's index
settings, ``PIP_INDEX_URL`` or ``pip.conf``, apply); about a second. Maven is asked through
``jars.served_connector``, which remembers what it learned in the cache.
"""

from __future__ import annotations

import functools
import logging
import re
import subprocess
import sys
from collections.abc import Callable

from onceproof.backends.base import BackendError
from onceproof.backends.common import jars

log = logging.getLogger("onceproof.spark_release")

OLDEST_SPARK = (3, 5)
"""The oldest Spark line the bundled pipeline runs on: 3.5, the oldest line with a maintained release
(spark.apache.org/versioning-policy.html) and the one whose connector's ``_2.12`` builds Maven serves."""
NEWEST_SPARK_MAJOR = 4
SUPPORTED_SPARK = f"{OLDEST_SPARK[0]}.{OLDEST_SPARK[1]} to {NEWEST_SPARK_MAJOR}.x"
"""The supported range, as messages and docs name it."""
_LINE = re.compile(r"^(\d+)\.(\d+)(?:\.x)?$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


class SparkReleaseError(BackendError):
    """No PySpark release can be chosen for what ``--spark-version`` names (the message names the fix)."""


def problem(wanted: str) -> str | None:
    """Why ``wanted`` cannot name a PySpark release (not ``X.Y``, ``X.Y.x`` or ``X.Y.Z``, or outside
    :data:`SUPPORTED_SPARK`), or ``None``. Pure: whether PyPI and Maven serve it is learned by :func:`resolve`."""
    m = _LINE.match(wanted) or _RELEASE.match(wanted)
    if not m:
        return (f"{wanted!r} is not a Spark release or line: give a line such as 3.5 or 4.1 (its newest patch) "
                f"or a release such as 3.5.7")
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) < OLDEST_SPARK or major > NEWEST_SPARK_MAJOR:
        return f"Spark {wanted} is outside the supported range, {SUPPORTED_SPARK} (docs/versions.md)"
    return None


def pypi_releases(timeout_s: float = 60.0) -> list[str]:
    """Every final ``pyspark`` release the package index serves (``["4.3.0", "4.2.1", ...]``, newest first),
    from ``pip index versions pyspark``.

    Raises: ``SparkReleaseError`` when pip cannot list them (no network, an index without pyspark)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "pyspark", "--disable-pip-version-check",
           "--no-input"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SparkReleaseError(f"`{' '.join(cmd)}` failed ({e}): check network access to PyPI") from e
    m = re.search(r"^Available versions: (.+)$", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        raise SparkReleaseError(f"`{' '.join(cmd)}` listed no releases (exit {proc.returncode}): "
                                f"{(proc.stderr or proc.stdout).strip()[-500:]}; check network access to PyPI "
                                f"(or PIP_INDEX_URL)")
    return sorted((v.strip() for v in m.group(1).split(",") if _RELEASE.match(v.strip())),
                  key=jars.version_tuple, reverse=True)


def resolve(wanted: str, releases: Callable[[], list[str]] = pypi_releases,
            connector: Callable[[str], str] = jars.served_connector) -> str:
    """The PySpark release ``wanted`` names (module docstring): a full release as given once the index is
    seen to serve it, a line's newest patch whose connector Maven serves at the same version, else the
    line's newest patch. ``releases()`` lists the index's releases and ``connector(v)`` gives the connector
    version PySpark ``v`` runs with (unit tests pass their own).

    Raises: ``SparkReleaseError`` naming the fix (a bad or unsupported name, a release or line the index
    lacks, a line Maven serves no connector for, PyPI or Maven unreachable)."""
    wanted = wanted.strip()
    if why := problem(wanted):
        raise SparkReleaseError(why)
    served = releases()
    if _RELEASE.match(wanted):
        if wanted not in served:
            line = [v for v in served if jars.major_minor(v) == jars.major_minor(wanted)]
            raise SparkReleaseError(f"the package index serves no pyspark {wanted}; its {_line(wanted)} releases: "
                                    f"{', '.join(line) or 'none'}: choose one, or give the line {_line(wanted)}")
        return wanted
    line = [v for v in served if jars.major_minor(v) == jars.major_minor(wanted + ".0")]
    if not line:
        raise SparkReleaseError(f"the package index serves no pyspark {_line(wanted + '.0')}.x: choose a line from "
                                f"{SUPPORTED_SPARK} that it serves")
    try:
        for v in line:
            if connector(v) == v:
                return v
    except jars.ResolveError as e:
        raise SparkReleaseError(f"no Kafka connector for Spark {_line(line[0])}: {str(e).splitlines()[0]}") from e
    log.warning("Maven serves no spark-sql-kafka-0-10 of any PySpark %s patch at the same version: running "
                "%s with connector %s", _line(line[0]), line[0], connector(line[0]))
    return line[0]


def next_line(version: str, served: list[str]) -> str | None:
    """The Spark line after ``version``'s among the releases ``served`` (``"4.0"`` after ``"3.5.7"``: the next
    major's first line when the major ends), ``None`` when ``served`` has none newer. Pure."""
    newer = sorted({jars.major_minor(v) for v in served if jars.major_minor(v) > jars.major_minor(version)})
    return "{}.{}".format(*newer[0]) if newer else None


def next_release(version: str, releases: Callable[[], list[str]] = pypi_releases) -> str | None:
    """The release ``--spark-version`` would choose (:func:`release`) for the line after ``version``'s, ``None``
    when there is none (``upgrade:spark-version``). Raises ``SparkReleaseError``."""
    line = next_line(version, releases())
    return release(line) if line is not None else None


@functools.cache
def release(wanted: str) -> str:
    """:func:`resolve` with PyPI and Maven, once per process and name (the config check, then the run).

    Raises: ``SparkReleaseError``."""
    return resolve(wanted)


def _line(version: str) -> str:
    return "{}.{}".format(*jars.major_minor(version))
