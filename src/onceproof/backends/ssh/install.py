"""What the ssh backend ships to a node, content-addressed (Jepsen's ``db/setup!`` installs the same way:
over the control connection, once per version).

A :class:`Dist` is a named set of local files; on the node it lives in
``<root>/dist/<name>-<sha12>/`` (``sha12``: the first 12 hex digits of a SHA-256 over every file's name
and content), complete once ``.complete`` is there. :func:`ensure` uploads one tar through SFTP and
unpacks it into ``<dir>.partial``, then renames it, so a dist is there whole or not at all and a second
run with the same files uploads nothing.
"""

from __future__ import annotations

import functools
import hashlib
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from onceproof.backends.common import jars
from onceproof.backends.ssh.remote import Remote


@dataclass(frozen=True)
class Dist:
    """Files to ship: ``(name inside the dist, local path)`` pairs, and the dist's name.

    Attributes:
        name: e.g. ``kafka-4.1.1``.
        files: the files, in a stable order.
    """

    name: str
    files: tuple[tuple[str, Path], ...]
    unwheel: bool = False
    """Unpack the dist's ``wheels/*.whl`` into its ``site/`` on the node (``onceproof-node.py unwheel``)."""

    @functools.cached_property
    def sha12(self) -> str:
        """The first 12 hex digits of SHA-256 over each file's name, size and content (read once per dist:
        :func:`ensure` and :meth:`path_on` ask for it again)."""
        h = hashlib.sha256()
        for arc, path in self.files:
            h.update(arc.encode() + b"\0" + str(path.stat().st_size).encode() + b"\0")
            with path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        return h.hexdigest()[:12]

    def path_on(self, root: PurePosixPath) -> PurePosixPath:
        """Where the dist lives on a node whose onceproof root is ``root``."""
        return root / "dist" / f"{self.name}-{self.sha12}"

    def size_bytes(self) -> int:
        """The files' total size, bytes."""
        return sum(p.stat().st_size for _, p in self.files)


def kafka_dist(version: str = "") -> Dist:
    """The broker's jars of Kafka ``version`` (``jars.kafka_classpath(version)``: Maven-resolved, or
    ``$KAFKA_HOME/libs``; ``""`` is the pin) as ``libs/<jar>``, one dist per release. Raises:
    ``jars.ResolveError``."""
    cp = jars.kafka_classpath(version)
    return Dist(f"kafka-{cp.version}", tuple((f"libs/{j.name}", j) for j in sorted(cp.jars, key=lambda j: j.name)))


def site_dist() -> Dist:
    """The Python the Spark nodes run the pipeline with, as wheels unpacked into ``site/``: exactly the
    spark image's packages (``images.python_requirements()``: pyspark, py4j, confluent-kafka, psycopg, ...,
    at the driver's versions), from the same wheelhouse. Binary wheels are the harness's (CPython 3.11,
    manylinux x86_64): the node's ``python3`` must match. Raises: ``ImageBuildError`` when pip cannot
    provide a wheel."""
    from onceproof.backends.docker import images
    wheels = images.gather_wheels(images.python_requirements())
    return Dist("site", tuple((f"wheels/{w.name}", w) for w in sorted(wheels, key=lambda w: w.name)), unwheel=True)


def source_dist() -> Dist:
    """onceproof's own package (``checkout.IMPORT_ROOT/onceproof``, Python files and package data, no
    caches) as ``src/onceproof/...``: the driver runs ``onceproof.job`` from it and the executors unpickle
    the pipeline's functions by module, so every Spark node needs it on its ``PYTHONPATH`` (as the Docker
    backend mounts the repository). Content-addressed like the others: a changed source ships again."""
    from onceproof.checkout import IMPORT_ROOT
    pkg = IMPORT_ROOT / "onceproof"
    files = sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix not in (".pyc", ".pyo"))
    return Dist("onceproof-src", tuple((f"src/{p.relative_to(IMPORT_ROOT).as_posix()}", p) for p in files))


def spark_kafka_dist() -> Dist:
    """Spark's Kafka connector jars for the driver's PySpark (``jars.spark_kafka_classpath()``), as
    ``jars/<jar>``. Raises: ``jars.ResolveError``."""
    cp = jars.spark_kafka_classpath()
    files = tuple((f"jars/{j.name}", j) for j in sorted(cp.jars, key=lambda j: j.name))
    return Dist(f"spark-kafka-{cp.version}", files)


def ensure(remote: Remote, root: PurePosixPath, dist: Dist, *, timeout_s: float = 600.0) -> tuple[PurePosixPath, bool]:
    """Make ``dist`` present on the node behind ``remote``.

    Returns: ``(its directory on the node, whether it was uploaded now)``.

    Raises: :class:`~onceproof.backends.ssh.remote.RemoteError` when a step fails on the node.
    """
    target = dist.path_on(root)
    if remote.run(["test", "-e", str(target / ".complete")], timeout_s=30).returncode == 0:
        return target, False
    with tempfile.TemporaryDirectory(prefix="onceproof-dist-") as tmp:
        tar = Path(tmp) / f"{dist.name}.tar"
        with tarfile.open(tar, "w") as t:
            for arc, path in dist.files:
                t.add(path, arcname=arc)
        remote_tar = root / "dist" / f"{dist.name}-{dist.sha12}.tar"
        remote.run(["mkdir", "-p", str(root / "dist")], timeout_s=30).check()
        remote.put(tar, remote_tar, timeout_s=timeout_s)
    partial = f"{target}.partial"
    unwheel = (f'python3 "{root}/bin/onceproof-node.py" unwheel --root "{root}" --run install -- '
               '"$2/wheels" "$2/site" >/dev/null; rm -rf "$2/wheels"; ') if dist.unwheel else ""
    script = ('set -e; rm -rf "$2"; mkdir -p "$2"; tar -xf "$1" -C "$2"; ' + unwheel + 'touch "$2/.complete"; '
              'rm -rf "$3"; mv "$2" "$3"; rm -f "$1"')
    remote.run(["sh", "-c", script, "sh", str(remote_tar), partial, str(target)], timeout_s=timeout_s).check()
    return target, True
