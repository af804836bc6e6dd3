"""A second PySpark runtime for the driver: the previous minor release, in the harness's own cached
environment, so that ``upgrade:pyspark`` can restart the query from the same checkpoint on another
PySpark version (a release is only safe if a running query survives being restarted into it, and out
of it).

Why a separate environment the harness builds, not the user's: the harness's ``.venv`` holds exactly
one PySpark (``pyproject.toml`` pins it), and the run must not depend on whatever else is installed on
the machine. So the harness builds ``<cache>/runtimes/pyspark-<version>/`` (``<cache>`` =
``$ONCEPROOF_CACHE``, default ``~/.cache/onceproof``) once and reuses it:

1. ``python -m venv --without-pip`` from the harness's interpreter (same Python minor);
2. ``pip install --no-deps --target <its site-packages> pyspark==<version>``, then the ``py4j`` that
   this PySpark's metadata requires (read from its ``Requires-Dist``, not guessed);
3. a ``.pth`` file in its site-packages running ``import site; site.addsitedir('<the harness's
   site-packages>')``: pandas, pyarrow, confluent-kafka and the harness's own packages import from the
   harness's environment, while ``pyspark`` and ``py4j`` resolve to this runtime's (its own
   site-packages come first on ``sys.path``; the harness's are appended after them).

``--no-deps``: only PySpark and py4j may differ between the two runtimes. Letting pip resolve
PySpark's optional and transitive requirements would download a second pandas/pyarrow/numpy, or pick
versions other than those the harness (its sink, its checker) was tested with; the point is to change
the Spark version and nothing else.

The build goes into ``pyspark-<version>.partial`` under a file lock (``backends/gobuild.py``'s
``built_once``), is checked (``import pyspark`` must report ``<version>``), renamed into place, and its
``.complete`` stamp is written last: a build cut short (an error, a kill, a teardown) is never used, and
is removed by the next build or by :func:`discard_partial`. Measured on 2 cores: 38 s cold (PyPI ships
PySpark as a ~400 MB source distribution that pip turns into a wheel; 68 s at ``nice 19`` beside a
running cluster suite), 5-7 s from pip's cache; 486 MB on disk. A local ``SparkSession`` of the built
4.2.1 runtime reports ``spark.version`` 4.2.1 and runs and stops a streaming query.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from onceproof.backends.base import BackendError
from onceproof.backends.cache import cache_dir
from onceproof.backends.common.processes import _die_with_parent
from onceproof.backends.gobuild import built_once
from onceproof.backends.local import spark_cds

log = logging.getLogger("onceproof.runtimes")

DEFAULT_PREVIOUS = "4.2.1"
"""The previous PySpark minor to the harness's own (``pyproject.toml``: 4.3.0)."""
PREVIOUS_ENV = "ONCEPROOF_PREVIOUS_PYSPARK"
"""Environment variable naming another previous version (e.g. ``4.2.0``)."""
PTH_NAME = "onceproof-harness.pth"
PYTHON = Path("bin") / "python"
_VERSION = re.compile(r"^\d+\.\d+\.\d+([.-]?\w+)?$")


class RuntimeBuildError(BackendError):
    """The second PySpark runtime could not be built (its message names the fix)."""


@dataclass(frozen=True)
class Runtime:
    """A built runtime: PySpark ``version`` in the virtualenv at ``root``."""

    version: str
    root: Path

    @property
    def python(self) -> Path:
        """The runtime's interpreter (a virtualenv's ``bin/python``)."""
        return self.root / PYTHON

    @property
    def site_packages(self) -> Path:
        """Where its PySpark and py4j are installed."""
        return site_packages(self.root)

    @property
    def pyspark_dir(self) -> Path:
        """Its ``pyspark`` package (``jars/``; the local-cluster workers' ``work/``)."""
        return self.site_packages / "pyspark"


def site_packages(root: Path) -> Path:
    """``<root>/lib/python3.X/site-packages`` of a virtualenv made by this interpreter."""
    return root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def previous_version() -> str:
    """The previous PySpark minor to run: ``$ONCEPROOF_PREVIOUS_PYSPARK``, default :data:`DEFAULT_PREVIOUS`.

    Raises: ``RuntimeBuildError`` when the variable is not a version (``4.2.1``)."""
    v = os.environ.get(PREVIOUS_ENV, "").strip() or DEFAULT_PREVIOUS
    if not _VERSION.match(v):
        raise RuntimeBuildError(f"{PREVIOUS_ENV}={v!r} is not a PySpark version (e.g. {DEFAULT_PREVIOUS})")
    return v


def runtime_dir(version: str) -> Path:
    """``<cache>/runtimes/pyspark-<version>``."""
    return cache_dir() / "runtimes" / f"pyspark-{version}"


def harness_site_packages() -> Path:
    """The harness interpreter's site-packages (what the runtime's ``.pth`` adds after its own)."""
    return Path(sysconfig.get_paths()["purelib"])


def pth_line(harness_site: Path) -> str:
    """The ``.pth`` line that appends ``harness_site`` (and the ``.pth`` files in it) to ``sys.path``."""
    return f"import site; site.addsitedir({str(harness_site)!r})\n"


def py4j_requirement(dist_info: Path) -> str:
    """The ``py4j`` requirement of the PySpark whose ``*.dist-info`` directory is ``dist_info`` (e.g.
    ``py4j==0.10.9.9`` or ``py4j<0.10.9.10,>=0.10.9.7``), its unconditional ``Requires-Dist``.

    Raises: ``RuntimeBuildError`` when the metadata names none."""
    meta = Parser().parsestr((dist_info / "METADATA").read_text())
    for req in meta.get_all("Requires-Dist") or []:
        spec, _, marker = req.partition(";")
        spec = spec.strip().replace(" ", "")
        if re.match(r"^py4j\b", spec, re.I) and "extra" not in marker:
            return spec.replace("(", "").replace(")", "")
    raise RuntimeBuildError(f"{dist_info}/METADATA requires no py4j; cannot tell which py4j to install")


def _run(cmd: list[str], what: str, timeout_s: float) -> str:
    try:
        # SIGKILLed with the harness (prctl): a killed harness leaves no pip writing into the cache
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeBuildError(f"{what}: `{' '.join(cmd)}` failed ({e}); check network access to PyPI "
                                f"(or your pip index settings) and retry") from e
    if proc.returncode != 0:
        raise RuntimeBuildError(
            f"{what} failed (exit {proc.returncode}).\nCommand: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-3000:]}\nCheck network access to PyPI (or PIP_INDEX_URL), that the version "
            f"exists (set {PREVIOUS_ENV} to another, e.g. 4.2.0), then retry; nothing half-built is kept.")
    return proc.stdout


def pip_install(site: Path, version: str, timeout_s: float = 900.0) -> None:
    """Install ``pyspark==version`` and the py4j it requires into ``site`` with the harness's pip
    (``--no-deps --target``; see the module docstring). Raises ``RuntimeBuildError``."""
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
           "--target", str(site)]
    _run([*pip, f"pyspark=={version}"], f"installing PySpark {version}", timeout_s)
    dist = next(site.glob("pyspark-*.dist-info"), None)
    if dist is None:
        raise RuntimeBuildError(f"pip left no pyspark-*.dist-info in {site}")
    _run([*pip, py4j_requirement(dist)], f"installing py4j for PySpark {version}", timeout_s)


def ensure(version: str | None = None, install=pip_install, timeout_s: float = 900.0,
           train=None) -> Runtime:
    """The runtime of PySpark ``version`` (default :func:`previous_version`), built on first use.

    ``install(site_packages, version)`` puts PySpark and py4j into the new virtualenv's site-packages
    (default :func:`pip_install`; a unit test passes its own). The result is checked: the runtime's
    interpreter must import ``pyspark`` at ``version`` from its own site-packages. A runtime built for
    another harness environment gets its ``.pth`` pointed at this one's. Then ``train(runtime)`` (default
    :func:`train_class_sharing`) makes its Spark JVMs' class-data sharing archives when they are missing.

    Raises: ``RuntimeBuildError`` naming the fix (pip failed, no network, a version PyPI lacks, the
    check failed); nothing half-built is left in the cache.
    """
    version = version or previous_version()
    if not _VERSION.match(version):
        raise RuntimeBuildError(f"{version!r} is not a PySpark version")
    harness_site = harness_site_packages()

    def build(tmp: Path) -> None:
        try:
            _run([sys.executable, "-m", "venv", "--without-pip", str(tmp)], "creating the runtime's virtualenv",
                 timeout_s)
            site = site_packages(tmp)
            site.mkdir(parents=True, exist_ok=True)
            install(site, version)
            (site / PTH_NAME).write_text(pth_line(harness_site))
            check(Runtime(version, tmp))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    target = runtime_dir(version)
    built_once(target, str(PYTHON), version, build)
    rt = Runtime(version, target)
    pth = rt.site_packages / PTH_NAME
    if not pth.exists() or pth.read_text() != pth_line(harness_site):  # the cache is shared by clones
        tmp = pth.with_suffix(".tmp")
        tmp.write_text(pth_line(harness_site))
        os.replace(tmp, pth)
    (train or train_class_sharing)(rt)
    return rt


def train_class_sharing(rt: Runtime) -> list[str]:
    """Make ``rt``'s Spark driver and executor class-data sharing archives when they are missing
    (``backends/local/spark_cds.py``, once per runtime and machine: about 40 s on 2 cores), so that its
    drivers, the bundled pipeline's and a user's job's on its interpreter, start as fast as on the
    harness's own PySpark. An archive only speeds a start up: a failed training run is a line in the
    returned list (and the log), never an error."""
    try:
        lines = spark_cds.train_archives(str(rt.python), rt.pyspark_dir, rt.version)
    except Exception as e:  # noqa: BLE001 - the runtime works without its archives, only slower
        lines = [f"PySpark {rt.version}'s class-data sharing archives not made ({e}); its drivers start without them"]
    for line in lines:
        log.info("%s", line)
    return lines


def check(rt: Runtime) -> None:
    """Run ``rt``'s interpreter: it must import ``pyspark`` ``rt.version`` from its own site-packages and
    ``py4j``, and see the harness's packages (``confluent_kafka``). Raises ``RuntimeBuildError``."""
    code = ("import pyspark, py4j, confluent_kafka, sys; "
            "print(pyspark.__version__); print(pyspark.__file__)")
    out = _run([str(rt.python), "-c", code], f"checking the PySpark {rt.version} runtime", 120).splitlines()
    got, where = (out + ["?", "?"])[:2]
    if got.strip() != rt.version or rt.site_packages.resolve() not in Path(where.strip()).resolve().parents:
        raise RuntimeBuildError(f"the runtime at {rt.root} imports pyspark {got.strip()} from {where.strip()}, "
                                f"not {rt.version} from {rt.site_packages}; delete it and retry")


def discard_partial(version: str | None = None) -> bool:
    """Remove a half-built runtime of ``version`` (default :func:`previous_version`) that no build holds
    the lock of (one left by a harness that was killed while building). Never waits for a running
    build; returns True when something was removed."""
    try:
        target = runtime_dir(version or previous_version())
    except RuntimeBuildError:
        return False
    partial = target.with_name(target.name + ".partial")
    if not partial.exists():
        return False
    try:
        with open(target.with_name(target.name + ".lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False  # a build runs; it cleans up after itself
            shutil.rmtree(partial, ignore_errors=True)
    except OSError:
        return False
    return True
