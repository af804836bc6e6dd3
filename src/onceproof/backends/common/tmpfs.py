"""Size-limited data filesystems for the brokers (``disk-full``): one tmpfs mount per node, filled to the
last byte by one file of the harness and emptied again.

Why tmpfs: a broker's log directory needs a filesystem of its own whose free space can reach zero without the
host's disk filling. A tmpfs mount (``mount -t tmpfs -o size=<n>m``, Linux ``tmpfs(5)``) is that filesystem in
one command, with no image file, no loop device and no ``mkfs``; a loop-mounted ext4 image needs the same
privilege (``CAP_SYS_ADMIN``) and more moving parts. It is sparse (a page is used only when written), so the
limit costs memory only as the broker writes, and ``fallocate(2)`` takes the free space at once. Without the
privilege the mount fails, the brokers start on the host's filesystem as usual, and every ``disk-full`` turn
is skipped with that reason (:func:`unavailable`), as clock faults are without libfaketime.

Safety: :func:`fill` writes only into a mount of ours (source :data:`SOURCE`, type ``tmpfs``, read from
``/proc/self/mounts``), never into a directory of the host's filesystem; :func:`unmount` likewise unmounts only
those. Mounts a run makes are noted in its run directory (:data:`NOTED`), so the reaper unmounts them when the
harness is SIGKILLed before its teardown (:func:`unmount_noted`).

Sizes are bytes unless named ``_mb`` (MiB).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from onceproof.backends.base import BackendError

log = logging.getLogger("onceproof.tmpfs")

SOURCE = "onceproof-disk"
"""The source name of our mounts (``/proc/self/mounts``' first field): only those are filled or unmounted."""
NOTED = "disk-mounts.txt"
"""In the run directory: the mount points the run made (one path a line), for the reaper."""
FILL_NAME = "onceproof-disk-fill"
"""The fill file, at the root of the mount (Kafka loads only directories of its log dir: it ignores it)."""
DEFAULT_MB = 512
"""Each node's filesystem (MiB) unless ``ONCEPROOF_DISK_MB`` says otherwise: a few minutes of this workload
write some tens of MB per node; a soak run planning ``disk-full`` needs more."""
_CHUNK = 1 << 20


def size_mb() -> int:
    """Each node's filesystem size (MiB): ``ONCEPROOF_DISK_MB``, else :data:`DEFAULT_MB`.

    Raises: ``ValueError`` for a value that is not a whole number ≥ 16."""
    raw = os.environ.get("ONCEPROOF_DISK_MB", "").strip()
    if not raw:
        return DEFAULT_MB
    if not raw.isdigit() or int(raw) < 16:
        raise ValueError(f"ONCEPROOF_DISK_MB must be a whole number of MiB ≥ 16, got {raw!r}")
    return int(raw)


def _unescape(field: str) -> str:
    """A ``/proc/self/mounts`` field with its octal escapes (``\\040`` for a space) decoded."""
    return field.encode().decode("unicode_escape")


def is_ours(path: Path, mounts: str | None = None) -> bool:
    """True when ``path`` is the mount point of a tmpfs of ours (:data:`SOURCE`); ``mounts``: the text of
    ``/proc/self/mounts`` (read when ``None``)."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return False
    want = os.path.realpath(path)
    for line in mounts.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] == SOURCE and f[2] == "tmpfs" and _unescape(f[1]) == want:
            return True
    return False


def mount(path: Path, mb: int) -> None:
    """Mount a tmpfs of ``mb`` MiB on the existing, empty directory ``path``.

    Raises: ``BackendError`` with ``mount``'s own message (not privileged, no binary)."""
    binary = shutil.which("mount")
    if binary is None:
        raise BackendError("no `mount` binary on PATH")
    p = subprocess.run([binary, "-t", "tmpfs", "-o", f"size={int(mb)}m,mode=0755", SOURCE, str(path)],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise BackendError(f"mount -t tmpfs on {path} failed: {(p.stderr or p.stdout).strip()[:200]} "
                           "(needs root or CAP_SYS_ADMIN)")


def unmount(path: Path) -> bool:
    """Unmount ``path`` if it is a mount of ours (lazily when busy); True when it was. Never raises."""
    if not is_ours(path):
        return False
    binary = shutil.which("umount") or "umount"
    for args in ([binary, str(path)], [binary, "-l", str(path)]):
        try:
            if subprocess.run(args, capture_output=True, timeout=30).returncode == 0:
                return True
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("%s failed: %s", " ".join(args), e)
    log.warning("could not unmount %s", path)
    return False


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """``None`` when this process can mount a tmpfs (probed once: a 1 MiB mount on a scratch directory,
    unmounted at once), else why not and the fix."""
    if not Path("/proc/self/mounts").exists():
        return "size-limited disks need Linux (tmpfs, /proc/self/mounts)"
    d = Path(tempfile.mkdtemp(prefix="onceproof-tmpfs-probe-"))
    try:
        mount(d, 1)
    except BackendError as e:
        return f"{e}; run the harness as root to plan disk-full"
    finally:
        unmount(d)
        with contextlib.suppress(OSError):
            d.rmdir()
    return None


def note(path: Path) -> None:
    """Note mount point ``path`` in the current run's :data:`NOTED` list (the run of ``$ONCEPROOF_RUN``;
    nothing outside a run), so that the reaper unmounts it when the harness dies before its teardown."""
    run = os.environ.get("ONCEPROOF_RUN")
    if run and Path(run).is_dir():
        with open(Path(run) / NOTED, "a") as f:
            f.write(f"{path}\n")


def unmount_noted(run_dir: str) -> list[str]:
    """Unmount every mount of ours in ``run_dir``'s :data:`NOTED` list; returns those unmounted. Never raises."""
    try:
        lines = (Path(run_dir) / NOTED).read_text().splitlines()
    except OSError:
        return []
    return [p for p in dict.fromkeys(ln.strip() for ln in lines if ln.strip()) if unmount(Path(p))]


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still write on ``path``'s filesystem (``statvfs``: ``f_bavail`` ×
    ``f_frsize``)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path) -> dict:
    """Take every free byte of the tmpfs mounted on ``path`` with :data:`FILL_NAME`: ``fallocate(2)`` of the
    free space, then 1 MiB and 4 KiB writes until ``ENOSPC`` (what was freed meanwhile). Returns
    ``{"path", "size_bytes", "free_before", "filled_bytes", "free_after"}``.

    Raises: ``BackendError`` when ``path`` is not a mount of ours (a host filesystem is never filled)."""
    if not is_ours(path):
        raise BackendError(f"{path} is not a size-limited disk of this run (no {SOURCE} tmpfs mounted there): "
                           "refusing to fill it")
    st = os.statvfs(path)
    before = st.f_bavail * st.f_frsize
    target = Path(path) / FILL_NAME
    fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        if before:
            with contextlib.suppress(OSError):
                os.posix_fallocate(fd, os.fstat(fd).st_size, before)
        for chunk in (b"\0" * _CHUNK, b"\0" * 4096):
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        break
                    raise
    finally:
        os.close(fd)
    return {"path": str(target), "size_bytes": st.f_blocks * st.f_frsize, "free_before": before,
            "filled_bytes": target.stat().st_size, "free_after": free_bytes(path)}


def unfill(path: Path) -> int:
    """Remove :data:`FILL_NAME` from ``path``; the bytes freed (0 without one). Never raises for a missing file."""
    target = Path(path) / FILL_NAME
    try:
        size = target.stat().st_size
        target.unlink()
    except FileNotFoundError:
        return 0
    return size
