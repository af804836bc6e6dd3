"""Class-data sharing archives for the JVMs onceproof starts on this machine: the Kafka brokers (and their
``StorageTool format``), the Spark driver and its executors (JEP 350, dynamic AppCDS archives, JDK 13+).

A JVM started with ``-XX:SharedArchiveFile=<archive>`` maps the classes that a training JVM of its kind
loaded, instead of reading, parsing and verifying them from the jars again. Every run starts four to ten
such JVMs, and on a small machine they start at the same time as each other. Measured on 2 cores (a quiet
machine, OpenJDK 17.0.15, Kafka 4.1.1, PySpark 4.3.0, two to three runs each, without → with):

* a single KRaft broker, launch to "started": 4.1 / 3.7 s → 2.1 / 2.1 s;
* a ``StorageTool format``: 1.44 / 1.47 / 1.41 s → 0.76 / 0.75 / 0.67 s (an archive of its own);
* a PySpark ``local-cluster[2,1,1024]`` session: 15.9 / 14.8 s → 8.2 / 8.3 s, then the driver's warm-up
  micro-batch (``onceproof.job.warm_up``) 10.2 / 9.4 s → 5.8 / 6.3 s.

An archive is made by a training run (``onceproof deps``, which ``make setup`` calls: the broker's in
``backends/local/kafka.py``, the Spark driver's and executor's in ``backends/local/spark_cds.py``). Its
JVM dumps it at a normal exit (``-XX:ArchiveClassesAtExit``) to a temporary file, which :func:`promote`
keeps only when ``java -Xshare:on -XX:SharedArchiveFile=<it> -cp <its class path> -version`` accepts it:
a truncated archive crashes the JVM that maps it (SIGBUS, seen here), while one made for another class
path or JDK is ignored without a word (``-Xshare:auto``, the JVM's default) and that JVM starts as before.
So a missing or stale archive costs the speed-up and nothing else. ``ONCEPROOF_CDS=0`` turns archives
off (no archive is used or made), for A/B measurements.

Archives live in ``<cache>/cds/`` (``backends/cache.py``), one per kind and per (JDK, class path), with a
``.json`` beside each naming what it was made for. Sizes here: broker 50 MB, format 22 MB, Spark driver
172 MB, executor 85 MB.

Written here rather than taken from a library: it is two JVM options and a cache file, and no Python
library manages CDS archives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

from onceproof.backends.cache import cache_dir

ENV = "ONCEPROOF_CDS"
"""Set to ``0`` to use and make no archive."""

VERIFY_TIMEOUT_S = 30.0
"""The longest :func:`promote`'s ``java -version`` check may take, s."""


def enabled() -> bool:
    """Whether archives are used and made (``ONCEPROOF_CDS`` is not ``0``)."""
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


def archive(kind: str, java: str, key: str) -> Path:
    """The archive of JVMs of ``kind`` (``kafka``, ``kafka-tool``, ``spark-driver``, ``spark-executor``) run by
    the ``java`` binary with ``key`` (their class path, or what decides it: the PySpark jars directory and
    version). Pure: the file need not exist."""
    real = os.path.realpath(java)
    digest = hashlib.sha256(f"{kind}\0{real}\0{key}".encode()).hexdigest()[:16]
    return cache_dir() / "cds" / f"{kind}-{digest}.jsa"


def stamp(paths) -> str:
    """A digest of the size and modification time of each of ``paths`` that is a file (directories and
    missing paths count by name only): what a JVM checks before it maps a dynamic archive made with those
    jars on its class path. A class path re-created at the same place (a fresh clone's virtualenv at the
    same directory, as CI makes) has new times, and a JVM given the old archive ignores it with "The top
    archive failed to load"; a key with this stamp names a new archive, so the training run makes one.
    Units: sizes in bytes, times in ns."""
    h = hashlib.sha256()
    for p in sorted(str(x) for x in paths):
        try:
            st = os.stat(p)
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode() if stat.S_ISREG(st.st_mode)
                     else f"{p}\n".encode())
        except OSError:
            h.update(f"{p}\n".encode())
    return h.hexdigest()[:16]


def options(kind: str, java: str, key: str) -> list[str]:
    """The JVM options that map ``kind``'s archive: ``["-XX:SharedArchiveFile=<archive>"]`` when it exists
    and archives are :func:`enabled`, else ``[]``. Marks the archive used (its mtime), so that
    :func:`prune` keeps the archives in use, not the ones made last."""
    if not enabled():
        return []
    a = archive(kind, java, key)
    if not a.is_file():
        return []
    try:
        os.utime(a)
    except OSError:
        pass  # a cache we may read but not touch: pruning then goes by when it was made
    return [f"-XX:SharedArchiveFile={a}"]


def missing(kind: str, java: str, key: str) -> bool:
    """Whether a training run for ``kind`` would make something: archives are enabled and there is none."""
    return enabled() and not archive(kind, java, key).is_file()


def dump_target(kind: str, java: str, key: str) -> Path:
    """A fresh temporary path beside ``kind``'s archive, for a training JVM's
    ``-XX:ArchiveClassesAtExit=<it>``; its directory is created. Hand it to :func:`promote` once that JVM
    has exited."""
    final = archive(kind, java, key)
    final.parent.mkdir(parents=True, exist_ok=True)
    return final.with_name(f"{final.stem}.{os.getpid()}-{time.monotonic_ns()}.part")


def promote(tmp: Path, kind: str, java: str, key: str, classpath: str) -> str:
    """Keep the archive a training JVM dumped at ``tmp`` as ``kind``'s, if a JVM with ``classpath`` (what
    the training JVM ran with) maps it: ``java -Xshare:on -XX:SharedArchiveFile=<tmp> -cp <classpath>
    -version`` must exit 0 within :data:`VERIFY_TIMEOUT_S`. The rename is atomic; ``tmp`` is removed either
    way. Returns a line saying what happened (for ``onceproof deps``). Never raises for a bad archive."""
    final = archive(kind, java, key)
    try:
        if not tmp.is_file() or tmp.stat().st_size == 0:
            return f"{kind}: no archive was written (the training JVM did not exit normally)"
        crash = tmp.with_suffix(".hs_err.log")  # a damaged archive crashes the check: its report goes here
        try:
            proc = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={tmp}", f"-XX:ErrorFile={crash}",
                                   "-cp", classpath, "-version"],
                                  capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S, cwd=tmp.parent)
        except (OSError, subprocess.SubprocessError) as e:
            return f"{kind}: archive not kept, its check failed to run: {e}"
        finally:
            crash.unlink(missing_ok=True)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            return f"{kind}: archive not kept, the JVM refused it (exit {proc.returncode}: {last[0]})"
        os.replace(tmp, final)
        final.with_suffix(".json").write_text(json.dumps({"kind": kind, "java": os.path.realpath(java), "key": key,
                                                          "classpath": classpath, "bytes": final.stat().st_size}))
        gone = prune(kind)
        return (f"{kind}: class-data sharing archive {final} ({final.stat().st_size / 1e6:.0f} MB)"
                + (f"; {len(gone)} stale one(s) removed" if gone else ""))
    finally:
        tmp.unlink(missing_ok=True)


KEEP = 8
"""Archives kept per kind (the newest): each checkout's virtualenv has a class path of its own, and so has
each cached PySpark runtime (``backends/local/runtimes.py``: five lines, 3.5 to 4.2)."""


def prune(kind: str, keep: int = KEEP) -> list[Path]:
    """Remove ``kind``'s archives whose class path is gone (its first jar, :func:`_anchor`, no longer exists:
    a removed checkout or virtualenv, as every fresh clone's CI run leaves) and all but the ``keep`` most
    recently used (:func:`options`) or made of the rest, each with its ``.json``. Returns the archives
    removed. Never raises for a file it cannot read or remove."""
    d = cache_dir() / "cds"
    found = []
    for a in d.glob(f"{kind}-*.jsa"):
        if not re.fullmatch(rf"{re.escape(kind)}-[0-9a-f]{{16}}", a.stem):  # another kind's: kafka-tool-… for kafka
            continue
        try:
            meta = json.loads(a.with_suffix(".json").read_text())
            anchor = _anchor(str(meta.get("classpath", "")))
            found.append((a.stat().st_mtime, a, bool(anchor) and not os.path.exists(anchor)))
        except (OSError, ValueError):
            found.append((0.0, a, True))  # no readable record: nobody can tell what it is for
    found.sort(reverse=True)
    kept = 0
    removed = []
    for _, a, stale in found:
        if not stale and kept < keep:
            kept += 1
            continue
        for f in (a, a.with_suffix(".json")):
            try:
                f.unlink(missing_ok=True)
            except OSError:
                continue
        removed.append(a)
    return removed


def _anchor(classpath: str) -> str:
    """The class path entry that tells whether it still exists: its first jar (Spark's starts with
    ``pyspark/conf``, a directory a pip-installed PySpark does not have), else the directory of its first
    wildcard entry (``.../pyspark/jars/*``: Spark 3.5's executors name no jar), else its first entry. Pure."""
    entries = [e for e in classpath.split(os.pathsep) if e]
    jar = next((e for e in entries if e.endswith(".jar")), "")
    star = next((e[:-2] for e in entries if e.endswith(os.sep + "*")), "")
    return jar or star or (entries[0] if entries else "")
