"""Go binaries the backends build once from their modules (toxiproxy's server, the Compose v2 plugin);
:func:`built_once` also builds the second PySpark runtime (``backends/local/runtimes.py``).

The pattern both need: a binary in ``<cache>/<name>-<version>/`` that is reused while its ``.complete``
stamp exists; otherwise a build into a ``.partial`` sibling under a file lock (several processes may ask
at once), then an atomic rename into place. The Go environment keeps a user's ``GOFLAGS`` and ``go.work``
out and puts the module and build caches under the onceproof cache, shared by every Go build of ours.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from onceproof.backends.cache import cache_dir


def go_env(gobin: Path | None = None) -> dict[str, str]:
    """The environment for ``go``: module downloads (``GOMODCACHE``, made writable so it can be deleted)
    and build objects (``GOCACHE``) in the onceproof cache, static binaries (``CGO_ENABLED=0``: no C
    compiler needed), ``GOTOOLCHAIN`` ``local`` unless the caller set it; ``GOBIN`` when given.
    ``GOPROXY`` and friends are inherited."""
    root = cache_dir()
    env = dict(os.environ)
    env.update(GOPATH=str(root / "go"), GOMODCACHE=str(root / "go" / "pkg" / "mod"),
               GOCACHE=str(root / "go-build"), GOFLAGS="-modcacherw -trimpath -buildvcs=false",
               GO111MODULE="on", GOWORK="off", CGO_ENABLED="0",
               GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "local"))
    if gobin is not None:
        env["GOBIN"] = str(gobin)
    return env


def built_once(target: Path, binary_name: str, version: str, build: Callable[[Path], None]) -> Path:
    """``target/binary_name``, built by ``build(partial_dir)`` unless ``target/.complete`` exists.

    ``build`` must leave ``binary_name`` in the directory it is given (a fresh ``<target>.partial``) or
    raise; the directory then replaces ``target`` and the stamp (holding ``version``) is written last, so
    a build cut short is redone, never half-used. Concurrent callers wait on ``<target>.lock``; the
    second finds the stamp and returns at once.

    Raises: whatever ``build`` raises (its message should name the fix); ``FileNotFoundError`` when
    ``build`` returned without producing ``binary_name``.
    """
    binary, stamp = target / binary_name, target / ".complete"
    if stamp.exists() and binary.exists():
        return binary
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and binary.exists():  # built by another process while we waited
            return binary
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        build(tmp)
        if not (tmp / binary_name).exists():
            raise FileNotFoundError(f"the build left no {binary_name} in {tmp}")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        stamp.write_text(version + "\n")
    return binary
