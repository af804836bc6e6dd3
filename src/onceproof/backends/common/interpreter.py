"""The interpreter a user's ``--pipeline-cmd`` job runs with (``onceproof run --pipeline-python PATH``): the
user's own environment, with their PySpark, Delta and database drivers, which need not be onceproof's.

:func:`probe` asks the interpreter itself (a subprocess: the harness never imports the job's PySpark) for
its Python and PySpark versions, where its ``pyspark`` package lies, and the Scala version of the jars it
ships; :func:`refusal` says why onceproof cannot run a job on it. The backend then runs the driver and its
Python workers with it (``PYSPARK_PYTHON``) and resolves Spark's Kafka connector for that PySpark's
version (:func:`onceproof.backends.common.jars.spark_kafka_classpath`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from onceproof.backends.common import jars

DEPS_PACKAGES = {"delta": "delta-spark"}
"""``deps/`` library → the Python distribution that pins its version in a job's environment: a job's
delta-spark package calls into Delta's jars of the same version."""
JARS_ONLY = {"iceberg": "Iceberg's Spark runtime"}
"""``deps/`` libraries a job reaches through its ``{jars}`` alone (no Python package pins them), by how
messages name them: their build for the job's Spark line is always needed."""

PROBE = ("import json, pathlib, sys\n"
         "from importlib import metadata\n"
         "out = {'python': sys.executable, 'python_version': '.'.join(map(str, sys.version_info[:3]))}\n"
         f"out['packages'] = {{}}\n"
         f"for d in {sorted(DEPS_PACKAGES.values())!r}:\n"
         "    try:\n"
         "        out['packages'][d] = [metadata.version(d), [r for r in (metadata.requires(d) or [])\n"
         "                              if r.replace('_', '-').lower().startswith('pyspark')]]\n"
         "    except metadata.PackageNotFoundError:\n"
         "        pass\n"
         "try:\n"
         "    import pyspark\n"
         "    out['pyspark_version'] = pyspark.__version__\n"
         "    out['pyspark_dir'] = str(pathlib.Path(pyspark.__file__).resolve().parent)\n"
         "except Exception as e:\n"
         "    out['pyspark_error'] = f'{type(e).__name__}: {e}'\n"
         "print(json.dumps(out))\n")
"""The probe run by the interpreter: one JSON line (``pyspark_error`` when PySpark does not import;
``packages``: ``{distribution: [version, [its pyspark requirements]]}`` of :data:`DEPS_PACKAGES` installed)."""

SPARK_MAJOR = 4
"""The Spark major version onceproof's own pipeline runs on (Spark 4 ships Scala 2.13 only:
spark.apache.org/docs/latest, "Downloading"); a user's job may also run on Spark 3.5 (``jars.SPARK_LINES``)."""
_SCALA_JAR = re.compile(r"^scala-library-(\d+\.\d+)\.\d+\.jar$")


class InterpreterError(ValueError):
    """The interpreter cannot run a job: missing, not Python, without PySpark, or a Spark onceproof does not
    speak. The message names the fix."""


@dataclass(frozen=True)
class Interpreter:
    """A probed interpreter. ``python``: the path given (run as is); ``python_version``: ``"3.12.4"``;
    ``pyspark_version``: ``"4.2.0"``; ``pyspark_dir``: its ``pyspark`` package directory (``jars/`` in it);
    ``scala``: the Scala binary version of those jars (``"2.13"``), ``""`` when none was found;
    ``packages``: ``{distribution: (version, pyspark requirements)}`` of :data:`DEPS_PACKAGES` it has
    (``{"delta-spark": ("4.4.0", ("pyspark<4.3.0,>=4.2.0",))}``)."""

    python: str
    python_version: str
    pyspark_version: str
    pyspark_dir: Path
    scala: str
    packages: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def deps_versions(self) -> dict[str, str]:
        """``{deps/ library: version}`` its packages pin (``{"delta": "4.4.0"}``), for
        :func:`onceproof.backends.common.jars.deps_classpath`."""
        have = {d: v for d, v, _ in self.packages}
        return {lib: have[d] for lib, d in DEPS_PACKAGES.items() if d in have}

    @property
    def jars_dir(self) -> Path:
        """``pyspark/jars`` of this interpreter's PySpark."""
        return self.pyspark_dir / "jars"

    @property
    def spark_major_minor(self) -> tuple[int, int]:
        """``(4, 2)`` for PySpark ``4.2.0``."""
        return jars.major_minor(self.pyspark_version)


def scala_of(jars_dir: Path) -> str:
    """The Scala binary version of ``scala-library-X.Y.Z.jar`` in ``jars_dir`` (``"2.13"``), ``""`` if none."""
    for j in sorted(jars_dir.glob("scala-library-*.jar")):
        m = _SCALA_JAR.match(j.name)
        if m:
            return m.group(1)
    return ""


@functools.lru_cache(maxsize=16)
def probe(python: str, timeout_s: float = 120.0) -> Interpreter:
    """Run :data:`PROBE` with ``python`` (a path, or a name on ``PATH``) in at most ``timeout_s`` seconds,
    once per process: the config check and the backend ask the same interpreter (a refusal is not cached).

    Raises: :class:`InterpreterError` when it is missing, not executable, does not answer, or has no
    importable PySpark, each naming the fix.
    """
    exe = python if os.sep in python else shutil.which(python)
    if not exe or not Path(exe).is_file():
        raise InterpreterError(f"{python}: no such interpreter; give the python of your job's environment, "
                               "e.g. --pipeline-python ~/venvs/job/bin/python")
    if not os.access(exe, os.X_OK):
        raise InterpreterError(f"{python}: not executable; give the python of your job's environment")
    try:
        p = subprocess.run([exe, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InterpreterError(f"{python}: did not answer in {timeout_s:g} s (import pyspark); check that it "
                               "starts: {python} -c 'import pyspark'") from None
    except OSError as e:
        raise InterpreterError(f"{python}: cannot run it ({e}); give a Python interpreter") from None
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise InterpreterError(f"{python}: not a Python interpreter onceproof can ask (exit {p.returncode}: "
                               f"{(p.stderr or p.stdout).strip()[-300:]})") from None
    if "pyspark_error" in out:
        raise InterpreterError(f"{python} cannot import pyspark ({out['pyspark_error']}); install it into that "
                               f"environment: {python} -m pip install 'pyspark>={SPARK_MAJOR}.0'")
    pyspark_dir = Path(out["pyspark_dir"])
    pkgs = tuple((d, str(v), tuple(map(str, reqs))) for d, (v, reqs) in sorted((out.get("packages") or {}).items()))
    return Interpreter(python=exe, python_version=out["python_version"], pyspark_version=out["pyspark_version"],
                       pyspark_dir=pyspark_dir, scala=scala_of(pyspark_dir / "jars"), packages=pkgs)


def refusal(i: Interpreter) -> str | None:
    """Why onceproof cannot run a job on ``i``, naming the fix; ``None`` when it can: its PySpark must be
    on Spark 3.5 or 4.x (``jars.SPARK_LINES``; the Kafka connector is resolved as
    ``spark-sql-kafka-0-10_<scala>`` for that version) with the Scala jars of its line (``jars.SCALA``)."""
    major, minor = i.spark_major_minor
    if not (major == SPARK_MAJOR or (major, minor) == (3, 5)):
        return (f"{i.python} has PySpark {i.pyspark_version}; onceproof runs jobs on Spark {jars.SPARK_LINES}: "
                f"install one of those there ({i.python} -m pip install 'pyspark>=3.5,<{SPARK_MAJOR + 1}')")
    if i.scala and i.scala != jars.SCALA[major]:
        return (f"{i.python}'s PySpark ships Scala {i.scala} jars; onceproof resolves the Kafka connector of "
                f"Spark {major}.x for Scala {jars.SCALA[major]}: use a PySpark built for Scala {jars.SCALA[major]}")
    if not i.jars_dir.is_dir():
        return f"{i.python}'s PySpark has no jars directory ({i.jars_dir}): reinstall pyspark there"
    return None


def jars_only_refusal(python: str, pyspark_version: str, libraries: tuple[str, ...]) -> str | None:
    """Why a job on ``python`` (PySpark ``pyspark_version``) cannot have the :data:`JARS_ONLY` ones of
    ``libraries`` in its ``{jars}`` (no build for its Spark line: ``jars.spark_line``), naming the fix;
    ``None`` when it can. Pure but for reading the pom."""
    for lib in libraries:
        if lib not in JARS_ONLY:
            continue
        try:
            jars.spark_line(lib, pyspark_version)
        except jars.NoBuildForSpark:
            lines = jars.spark_lines(lib)
            return (f"{python} has PySpark {pyspark_version}, and {JARS_ONLY[lib]}, which onceproof puts in "
                    f"{{jars}}, is built for Spark {', '.join(lines)} only: run the job on one of those "
                    f"(--pipeline-python with an environment of pyspark {lines[-1]}.x)")
    return None


def deps_refusal(i: Interpreter, libraries: tuple[str, ...]) -> str | None:
    """Why the ``deps/`` ``libraries`` a job's ``{jars}`` carry (``Sink.jars``: ``("delta",)`` for
    ``--output delta``) cannot match ``i``, naming the fix; ``None`` when they can. Only a library whose
    package the job's environment has (:data:`DEPS_PACKAGES`) is checked, for two things: the package's own
    ``pyspark`` requirement holds for ``i``'s PySpark (PEP 440, as pip would check it), and the library
    builds for ``i``'s Spark line (``jars.spark_line``). A job without the package (a Delta table written
    with delta-rs) needs no jars and is not refused. A library of :data:`JARS_ONLY` (Iceberg's runtime)
    is always checked for a build for ``i``'s Spark line."""
    from packaging.requirements import InvalidRequirement, Requirement

    have = {d: (v, reqs) for d, v, reqs in i.packages}
    for lib in libraries:
        if lib in JARS_ONLY:
            why = jars_only_refusal(i.python, i.pyspark_version, (lib,))
            if why:
                return why
            continue
        dist = DEPS_PACKAGES.get(lib)
        if dist not in have:
            continue
        version, reqs = have[dist]
        for r in reqs:
            try:
                req = Requirement(r)
            except InvalidRequirement:
                continue
            if req.marker is None and not req.specifier.contains(i.pyspark_version, prereleases=True):
                return (f"{i.python} has {dist} {version}, which needs {req}, and PySpark {i.pyspark_version}: "
                        f"install a matching pair there ({i.python} -m pip install '{req}')")
        try:
            jars.spark_line(lib, i.pyspark_version)
        except jars.NoBuildForSpark:
            lines = jars.spark_lines(lib)
            return (f"{i.python} has {dist} {version} on Spark {'{}.{}'.format(*i.spark_major_minor)}, and Delta's "
                    f"Spark connector that onceproof resolves for {{jars}} builds for Spark {', '.join(lines)} only: "
                    f"run the job on one of those (--pipeline-python with pyspark {lines[-1]}.x and a delta-spark "
                    f"for it)")
    return None
