"""A FUSE layer that forgets what was written and not fsynced, on command: ``lose-unsynced-writes``'s disk
(issue 29, item 3), in the manner of Jepsen's use of LazyFS (``jepsen/src/jepsen/lazyfs.clj``; LazyFS:
dsrhaslab/lazyfs, "A FUSE file system with an internal dedicated page cache that only flushes data if
explicitly requested by the application. This is useful for simulating power failures and losing all unsynced
data.", README).

``python -m onceproof.backends.common.lazyfs --backing DIR --mount DIR --control SOCKET`` mounts a passthrough
file system at ``--mount`` over the real directory ``--backing`` and serves commands on the Unix socket
``--control`` (one JSON line in, one JSON line out; :func:`request`):

* ``crash`` (LazyFS's ``lazyfs::clear-cache``): every byte written since its file's last ``fsync`` /
  ``fdatasync`` is dropped, as a machine that lost power would drop it. Returns what was dropped per file
  (:meth:`LazyOps.crash`);
* ``checkpoint`` (LazyFS's ``lazyfs::cache-checkpoint``): everything written so far counts as synced (the
  backing files are fsynced);
* ``report`` (LazyFS's ``lazyfs::unsynced-data-report``): the files with unsynced writes, without dropping;
* ``ping``: ``{"ok": true}``.

``... lazyfs --control SOCKET --request CMD`` sends one command and prints the reply instead (how the ssh
backend reaches a layer on a node: this file and ``mfusepy.py`` are shipped there, standard library
otherwise).

**What is lost, what is kept** (LazyFS 0.3.0's semantics, ``lazyfs/src/lazyfs.cpp``): file *data* and file
*size* (writes, truncates, extensions) are volatile until the file is fsynced. Names are not: ``create``,
``mkdir``, ``rename``, ``unlink``, ``link``, ``symlink`` reach the backing directory at once and survive a
crash, as LazyFS passes them through too, so a directory ``fsync`` has nothing to make durable (it is passed
on). A file created and written but never fsynced therefore survives a crash empty. This is kinder than
POSIX's worst case (a name needs its directory fsynced) and close to ext4 and XFS in practice (their journal
commits a file's name with its ``fsync``). ``fsync`` of any handle of a file syncs that whole file. Writes
through a shared ``mmap`` (Kafka's offset and time indexes) reach the layer when the kernel writes the pages
back (``msync``, ``munmap``, the process's exit; FUSE's ``fuse_vma_close`` writes them at unmap): what was not
``msync``ed is dropped with the rest.

**How** (an undo log, not LazyFS's page cache): every write goes straight to the backing file, so reads are
the backing file's own (the kernel's page cache, at native speed) and memory holds only what a crash must put
back. For each file changed since its last sync the layer keeps its *synced size* and the *pre-images* of the
synced pages (:data:`PAGE` bytes) that a write or a truncate touched since; appends past the synced size (all
a Kafka segment gets) need no pre-image. ``crash`` truncates each such file back to its synced size and writes
its pre-images back, then forgets them; ``fsync`` forgets them after fsyncing the backing file. Memory: the
overwritten synced pages, at most once each between syncs (:meth:`LazyOps.report` gives ``preimage_bytes``).
Mount options: ``attr_timeout``, ``entry_timeout`` and ``negative_timeout`` 0 (as LazyFS's ``lfs_init``), so
that after a crash the kernel asks for sizes again; a file opened after a crash is read afresh (no
``keep_cache``); ``hard_remove`` (an unlinked open file is not renamed to ``.fuse_hidden*`` in a Kafka log
directory), ``nullpath_ok`` (operations on an open file use its handle). The broker must be dead before a
``crash``: a live writer would go on writing (:class:`onceproof.backends.base.UnsyncedLoss` kills it first).

**Why not LazyFS itself** (checked on this host, 2026-11-27, Debian 12, 2 cores): its 0.3.0 release builds
with cmake, g++ and ``libfuse3-dev`` after two changes to its CMake files: ``libpcache`` fetches toml11 and
spdlog from GitHub at configure time (``FetchContent``), which a machine of this project cannot reach (only
package registries), so they must come from Debian's ``libtoml11-dev`` and ``libspdlog-dev``; and the link
line lacks ``spdlog`` and ``fmt``. Built so, it mounted, kept a fsynced 10,000 bytes and dropped 5,000 unsynced
ones on ``lazyfs::clear-cache``, and wrote 200 MB (16 KiB writes, ``fsync`` every MiB) at 28.4 MB/s (225 MB/s
directly to the same disk); run in turn with this layer (median of 3, the host busy with another run): 32.8
MB/s, this layer 61.9, directly 305.8. But no registry ships it (not Debian, not PyPI), so the project's own files could
not install it on a new machine without vendoring its C++ sources; it keeps every unsynced byte in its own
RAM cache (Kafka fsyncs a segment only when it rolls, ``log.segment.bytes``: up to 64 MiB per partition here,
three brokers on one host) and serves reads of them from that cache; its README calls it a research
prototype. This layer needs only Debian's ``fuse3`` (``libfuse3.so.3``, ``fusermount3``) and ``mfusepy`` from
PyPI (ctypes bindings of libfuse's high-level API, the maintained fork of fusepy: no compiler, no headers).
``pyfuse3`` (libfuse3's low-level API under trio) is faster but builds a C extension against
``libfuse3-dev``. Throughput measured with :func:`throughput` (200 MB, 16 KiB writes, ``fsync`` every MiB):
the numbers above; Kafka here writes a few hundred KB/s.

Cleaning up: the layer unmounts itself when it ends (SIGTERM, SIGINT, SIGHUP: libfuse's handlers, and when
its parent dies: ``PR_SET_PDEATHSIG`` = SIGTERM). A SIGKILLed layer leaves a dead mount ("Transport endpoint
is not connected"): :func:`unmount` detaches it (``fusermount3 -u -z``, else ``umount -l``). Every mount is
noted in the run directory first (:func:`note`, :data:`NOTED`), and the reaper of a SIGKILLed harness
unmounts what is noted and still mounted by this layer (:func:`unmount_noted`), after it killed the run's
processes (the layer's included).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

FSNAME = "onceproof-lazyfs"
"""The ``fsname`` and ``subtype`` of every mount: ``/proc/self/mountinfo`` shows ``fuse.onceproof-lazyfs``."""
FSTYPE = f"fuse.{FSNAME}"
PAGE = 4096
"""Granularity (bytes) of the pre-images kept for synced bytes that are overwritten or cut."""
NOTED = "fuse-mounts.txt"
"""In the run directory: the mount points of the run's layers (one path a line), for the reaper."""
FIX = "make fuse-prereqs (Debian/Ubuntu: apt-get install fuse3); mfusepy comes with onceproof's dependencies"
READY_S = 10.0
"""How long :class:`Layer` waits for a new layer to be mounted and answer ``ping`` (s)."""
log = logging.getLogger("onceproof.lazyfs")


# ---------------------------------------------------------------------------------------------- host checks

def unavailable() -> str | None:
    """``None`` when a layer can be mounted here, else why not and the fix: ``/dev/fuse`` must be readable and
    writable, libfuse 3 (``libfuse3.so.3``) and ``mfusepy`` installed, and ``fusermount3`` or ``umount`` on the
    ``PATH`` to detach a dead layer. Does not mount anything (a container may still refuse the mount itself:
    :class:`Layer` then raises with libfuse's message)."""
    if not os.path.exists("/dev/fuse"):
        return f"no /dev/fuse (the kernel's FUSE device; a container needs --device /dev/fuse): {FIX}"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if ctypes.util.find_library("fuse3") is None:
        return f"libfuse 3 (libfuse3.so.3) is not installed: {FIX}"
    import importlib.util
    if importlib.util.find_spec("mfusepy") is None:
        return f"the Python package mfusepy is not installed: {FIX}"
    if not any(shutil.which(b) for b in ("fusermount3", "fusermount", "umount")):
        return f"neither fusermount3 nor umount is on the PATH: {FIX}"
    return None


def _unescape(field_: str) -> str:
    """A path of ``/proc/self/mountinfo`` (spaces, tabs, newlines and backslashes are octal escapes)."""
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field_ = field_.replace(esc, ch)
    return field_


def mounts(fstype: str = FSTYPE, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[str]:
    """Mount points of file systems of type ``fstype`` (default: this layer's), from ``mountinfo`` (never a
    ``stat`` of the mount point: a dead FUSE mount would answer ``ENOTCONN`` or hang). ``[]`` when unreadable."""
    out = []
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return []
    for ln in lines:
        left, sep, right = ln.partition(" - ")
        parts = left.split()
        if sep and len(parts) >= 5 and right.split()[:1] == [fstype]:
            out.append(_unescape(parts[4]))
    return out


def mounted(mount: Path | str) -> bool:
    """Whether a layer is mounted at ``mount`` (an absolute path; compared as given and resolved)."""
    p = os.path.abspath(mount)
    return p in mounts() or os.path.realpath(os.path.dirname(p)) + "/" + os.path.basename(p) in mounts()


def unmount(mount: Path | str, timeout_s: float = 10.0) -> bool:
    """Detach the layer mounted at ``mount`` (``fusermount3 -u -z``, ``fusermount -u -z``, then ``umount -l``:
    lazy, so a mount still in use or whose server died goes too). Only a mount of this layer's type is touched.
    Returns True when nothing of ours is mounted there afterwards. Never raises."""
    p = os.path.abspath(mount)
    for argv in (["fusermount3", "-u", "-z", p], ["fusermount", "-u", "-z", p], ["umount", "-l", p]):
        if not mounted(p):
            return True
        if shutil.which(argv[0]) is None:
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    return not mounted(p)


def note(mount: Path | str, run_dir: str | None = None) -> None:
    """Append ``mount`` to ``run_dir``'s :data:`NOTED` (default: the current run, ``$ONCEPROOF_RUN``; nothing
    outside a run), before it is mounted, so that the reaper can unmount it (:func:`unmount_noted`)."""
    run = run_dir or os.environ.get("ONCEPROOF_RUN")
    if run and Path(run).is_dir():
        with open(Path(run) / NOTED, "a") as f:
            f.write(f"{os.path.abspath(mount)}\n")


def unmount_noted(run_dir: str) -> list[str]:
    """:func:`unmount` every mount point of ``run_dir``'s :data:`NOTED` where a layer is still mounted; returns
    those unmounted. Never raises (the reaper's call)."""
    try:
        lines = (Path(run_dir) / NOTED).read_text().splitlines()
    except OSError:
        return []
    done = []
    for m in dict.fromkeys(x.strip() for x in lines if x.strip()):
        if mounted(m) and unmount(m):
            done.append(m)
    return done


# ---------------------------------------------------------------------------------------------- the layer

class _RWLock:
    """Many holders of the shared side (file operations) or one of the exclusive side (``crash``,
    ``checkpoint``), as LazyFS's ``cache_command_lock`` (a ``std::shared_mutex``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


@dataclass
class Unsynced:
    """One backing file changed since its last sync. ``fd``: the layer's own ``O_RDWR`` descriptor of it (kept
    until the file is synced, crashed or unlinked: renames do not matter); ``path``: its path under the mount
    when last seen (for reports); ``synced_size``: its size at the last sync (bytes); ``pages``: pre-images of
    synced pages touched since (page index → the synced bytes of that page, up to ``synced_size``);
    ``written``: bytes written since the sync; ``writes``: write calls since the sync."""

    fd: int
    path: str
    synced_size: int
    pages: dict[int, bytes] = field(default_factory=dict)
    written: int = 0
    writes: int = 0

    def save(self, start: int, end: int) -> None:
        """Keep the pre-images of the synced pages overlapping bytes ``[start, end)`` not kept yet (read from
        the backing file before it changes)."""
        end = min(end, self.synced_size)
        if start >= end:
            return
        for p in range(start // PAGE, (end - 1) // PAGE + 1):
            if p not in self.pages:
                lo = p * PAGE
                self.pages[p] = os.pread(self.fd, min(PAGE, self.synced_size - lo), lo)

    def describe(self) -> dict:
        """``{"path", "size", "synced_size", "written", "writes", "preimage_pages", "preimage_bytes"}`` now."""
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            size = None
        return {"path": self.path, "size": size, "synced_size": self.synced_size, "written": self.written,
                "writes": self.writes, "preimage_pages": len(self.pages),
                "preimage_bytes": sum(len(b) for b in self.pages.values())}


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _attrs(st: os.stat_result) -> dict:
    return {"st_mode": st.st_mode, "st_ino": st.st_ino, "st_nlink": st.st_nlink, "st_uid": st.st_uid,
            "st_gid": st.st_gid, "st_size": st.st_size, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns, "st_blocks": st.st_blocks, "st_blksize": st.st_blksize,
            "st_rdev": st.st_rdev}


def _mfusepy():
    """mfusepy, on libfuse 3 (it would take libfuse 2 first when both are installed). Imported only in the
    layer's process: the harness never loads libfuse. Raises ``OSError`` without libfuse, ``ImportError``."""
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    import mfusepy
    return mfusepy


def operations_class():
    """The :class:`_LazyOps` file system as an ``mfusepy.Operations``. Raises as :func:`_mfusepy`."""
    mfusepy = _mfusepy()

    class LazyOps(_LazyOps, mfusepy.Operations):
        pass

    LazyOps.__doc__ = _LazyOps.__doc__
    return LazyOps


def fuse_class():
    """``mfusepy.FUSE`` whose libfuse 3 ``truncate``, ``chmod``, ``chown`` and ``utimens`` pass the open file's
    handle on (mfusepy 3.1.1 drops it; with ``nullpath_ok`` an ``ftruncate`` comes without a path)."""
    mfusepy = _mfusepy()

    def dec(fs, path):
        return None if path is None else path.decode(fs.encoding, fs.errors)

    def fh_of(fip):
        return fip.contents.fh if fip else None

    class FUSE(mfusepy.FUSE):
        def truncate_fuse_3(self, path, length, fip):
            return self.operations.truncate(dec(self, path), length, fh_of(fip))

        def chmod_fuse_3(self, path, mode, fip):
            return self.operations.chmod(dec(self, path), mode, fh_of(fip))

        def chown_fuse_3(self, path, uid, gid, fip):
            uid = -1 if ctypes.c_uint32(uid + 1).value == 0 else uid
            gid = -1 if ctypes.c_uint32(gid + 1).value == 0 else gid
            return self.operations.chown(dec(self, path), uid, gid, fh_of(fip))

        def utimens_fuse_3(self, path, buf, fip):
            times = None
            if buf:
                times = (mfusepy.time_of_timespec(buf.contents.actime, use_ns=True),
                         mfusepy.time_of_timespec(buf.contents.modtime, use_ns=True))
            return self.operations.utimens(dec(self, path), times, fh_of(fip))

    return FUSE


class _LazyOps:
    """The file system (mfusepy's ``Operations``; paths are relative to the mount, starting with ``/``): a
    passthrough to ``backing`` that remembers, per file changed since its last sync, how to undo the change
    (:class:`Unsynced`). Thread-safe: libfuse calls it from several threads."""

    use_ns = True
    flag_nopath = True
    flag_nullpath_ok = True

    def __init__(self, backing: str):
        self.root = os.path.realpath(backing)
        self.rw = _RWLock()  # shared: file operations; exclusive: crash, checkpoint
        self.state = threading.Lock()  # guards unsynced, handles and the counters
        self.unsynced: dict[tuple[int, int], Unsynced] = {}
        self.handles: dict[int, tuple[tuple[int, int], str]] = {}  # fh -> (file key, path at open)
        self.counters = {"crashes": 0, "syncs": 0, "checkpoints": 0, "dropped_bytes": 0}
        self.mounted_at: float | None = None  # epoch s of libfuse's init: the mount is up

    # -- helpers

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _touch(self, key: tuple[int, int], path: str, fh: int | None = None) -> Unsynced:
        """The :class:`Unsynced` of file ``key``, made on its first change since a sync (its synced size is
        its size now, before the change). Its descriptor is reopened from the handle ``fh`` when given
        (``/proc/self/fd``: the same file whatever it is called now, renamed or unlinked), else from ``path``.
        Call with :attr:`state` held."""
        rec = self.unsynced.get(key)
        if rec is None:
            src = f"/proc/self/fd/{fh}" if fh is not None else self._full(path)
            fd = os.open(src, os.O_RDWR | os.O_CLOEXEC)
            st = os.fstat(fd)
            if _key(st) != key:  # renamed over meanwhile: not the file the handle names
                os.close(fd)
                raise OSError(errno.ESTALE, "file changed under its handle")
            rec = Unsynced(fd, path, st.st_size)
            self.unsynced[key] = rec
        return rec

    def _forget(self, key: tuple[int, int]) -> Unsynced | None:
        rec = self.unsynced.pop(key, None)
        if rec is not None:
            with contextlib.suppress(OSError):
                os.close(rec.fd)
        return rec

    def _forget_unlinked(self) -> None:
        """Drop the records of files no name points to any more (unlinked or renamed over): their data is
        gone with the name, which LazyFS, too, passes straight through. Call with :attr:`state` held."""
        for key, rec in list(self.unsynced.items()):
            try:
                if os.fstat(rec.fd).st_nlink == 0:
                    self._forget(key)
            except OSError:
                self._forget(key)

    # -- file-system operations: names (durable at once)

    def init_with_config(self, conn, config) -> None:
        self.mounted_at = time.time()
        if config is not None:
            config.attr_timeout = 0.0
            config.entry_timeout = 0.0
            config.negative_timeout = 0.0
            config.hard_remove = 1
            config.use_ino = 1
            config.nullpath_ok = 1

    def getattr(self, path, fh=None):
        st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        return _attrs(st)

    def access(self, path, amode):
        if not os.access(self._full(path), amode):
            raise OSError(errno.EACCES, "access")
        return 0

    def opendir(self, path):
        return os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def readdir(self, path, fh):
        """Entries with their inode and type: with ``use_ino`` a bare name would get inode 0, which
        ``readdir(3)`` skips as a deleted entry."""
        me = {"st_ino": os.fstat(fh).st_ino, "st_mode": stat.S_IFDIR}
        out = [(".", me, 0), ("..", me, 0)]
        with os.scandir(fh) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    out.append((e.name, {"st_ino": e.inode(), "st_mode": e.stat(follow_symlinks=False).st_mode}, 0))
        return out

    def releasedir(self, path, fh):
        os.close(fh)
        return 0

    def readlink(self, path):
        return os.readlink(self._full(path))

    def mknod(self, path, mode, dev):
        os.mknod(self._full(path), mode, dev)
        return 0

    def mkdir(self, path, mode):
        os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path):
        os.rmdir(self._full(path))
        return 0

    def symlink(self, target, source):
        os.symlink(source, self._full(target))
        return 0

    def link(self, target, source):
        os.link(self._full(source), self._full(target))
        return 0

    def unlink(self, path):
        with self.rw.shared():
            os.unlink(self._full(path))
            with self.state:
                self._forget_unlinked()
        return 0

    def rename(self, old, new):
        with self.rw.shared():
            os.rename(self._full(old), self._full(new))
            with self.state:
                self._forget_unlinked()
                prefix = old.rstrip("/") + "/"
                for rec in self.unsynced.values():
                    if rec.path == old:
                        rec.path = new
                    elif rec.path.startswith(prefix):
                        rec.path = new.rstrip("/") + "/" + rec.path[len(prefix):]
        return 0

    def chmod(self, path, mode, fh=None):
        os.chmod(fh if fh is not None else self._full(path), mode)
        return 0

    def chown(self, path, uid, gid, fh=None):
        if fh is not None:
            os.chown(fh, uid, gid)
        else:
            os.lchown(self._full(path), uid, gid)
        return 0

    def utimens(self, path, times=None, fh=None):
        target = fh if fh is not None else self._full(path)
        kw = {} if fh is not None else {"follow_symlinks": False}
        os.utime(target, ns=times, **kw) if times else os.utime(target, **kw)
        return 0

    def statfs(self, path):
        sv = os.statvfs(self._full(path))
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                            "f_ffree", "f_favail", "f_flag", "f_namemax")}

    # -- open files

    def _open(self, path: str, flags: int, mode: int | None) -> int:
        if flags & os.O_TRUNC:
            try:
                self.truncate(path, 0)
            except FileNotFoundError:
                if mode is None:
                    raise
        flags &= ~(os.O_TRUNC | os.O_APPEND)  # the kernel gives each write its offset
        fd = os.open(self._full(path), flags | os.O_CLOEXEC, *(() if mode is None else (mode,)))
        with self.state:
            self.handles[fd] = (_key(os.fstat(fd)), path)
        return fd

    def open(self, path, flags):
        return self._open(path, flags, None)

    def create(self, path, mode, flags=os.O_WRONLY | os.O_CREAT):
        return self._open(path, flags | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        with self.rw.shared():
            with self.state:
                key, opened_as = self.handles[fh]
                rec = self._touch(key, opened_as, fh)
                rec.save(offset, offset + len(data))
                rec.written += len(data)
                rec.writes += 1
            return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        with self.rw.shared():
            st = os.fstat(fh) if fh is not None else os.stat(self._full(path))
            with self.state:
                key = _key(st)
                if length != st.st_size or key in self.unsynced:
                    name = self.handles[fh][1] if fh is not None and fh in self.handles else path
                    rec = self._touch(key, name, fh)
                    rec.save(length, st.st_size)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._full(path), length)
        return 0

    def flush(self, path, fh):
        return 0  # close(2) is not a sync

    def release(self, path, fh):
        with self.state:
            self.handles.pop(fh, None)
        os.close(fh)
        return 0

    def fsync(self, path, datasync, fh):
        with self.rw.shared():
            (os.fdatasync if datasync else os.fsync)(fh)
            with self.state:
                key = self.handles[fh][0] if fh in self.handles else _key(os.fstat(fh))
                if self._forget(key) is not None:
                    self.counters["syncs"] += 1
        return 0

    def fsyncdir(self, path, datasync, fh):
        os.fsync(fh)  # passed on; names are durable at once anyway (module docstring)
        return 0

    # -- commands

    def report(self) -> dict:
        """``{"files": [Unsynced.describe() …], "unsynced_files", "unsynced_bytes", "preimage_bytes",
        "open_handles", "crashes", "syncs", "checkpoints", "dropped_bytes"}``: what a crash now would drop
        (``unsynced_bytes``: bytes written since the files' syncs)."""
        with self.state:
            files = sorted((r.describe() for r in self.unsynced.values()), key=lambda d: d["path"])
            return {"files": files, "unsynced_files": len(files),
                    "unsynced_bytes": sum(f["written"] for f in files),
                    "preimage_bytes": sum(f["preimage_bytes"] for f in files), "open_handles": len(self.handles),
                    **self.counters}

    def crash(self, settle_s: float = 2.0) -> dict:
        """Drop every unsynced change: each changed file back to its synced size and its kept pre-images.
        First waits up to ``settle_s`` s for the open handles to be released (the kernel sends a dead
        process's ``release`` asynchronously, after the writes its exit flushed).

        Returns ``{"files": {path: {"written", "writes", "size_before", "synced_size", "cut_bytes",
        "restored_pages", "restored_bytes"}}, "dropped_files", "dropped_bytes" (bytes written and lost),
        "cut_bytes" (bytes the files shrank by), "restored_bytes", "open_handles" (still open after the
        wait: 0 when no process has the files open; a live writer would go on writing), "settle_s" (the wait),
        "crash_s"}``."""
        t0 = time.monotonic()
        while self.handles and time.monotonic() - t0 < settle_s:
            time.sleep(0.02)
        settled = time.monotonic() - t0
        with self.rw.exclusive(), self.state:
            files = {}
            for key, rec in list(self.unsynced.items()):
                before = os.fstat(rec.fd).st_size
                os.ftruncate(rec.fd, rec.synced_size)
                for p, data in sorted(rec.pages.items()):
                    os.pwrite(rec.fd, data, p * PAGE)
                files[rec.path] = {"written": rec.written, "writes": rec.writes, "size_before": before,
                                   "synced_size": rec.synced_size, "cut_bytes": max(0, before - rec.synced_size),
                                   "restored_pages": len(rec.pages),
                                   "restored_bytes": sum(len(b) for b in rec.pages.values())}
                self._forget(key)
            dropped = sum(f["written"] for f in files.values())
            self.counters["crashes"] += 1
            self.counters["dropped_bytes"] += dropped
            return {"files": dict(sorted(files.items())), "dropped_files": len(files), "dropped_bytes": dropped,
                    "cut_bytes": sum(f["cut_bytes"] for f in files.values()),
                    "restored_bytes": sum(f["restored_bytes"] for f in files.values()),
                    "open_handles": len(self.handles), "settle_s": round(settled, 3),
                    "crash_s": round(time.monotonic() - t0 - settled, 4)}

    def checkpoint(self) -> dict:
        """Everything written so far counts as synced (each changed backing file is fsynced, its record
        dropped): ``{"synced_files", "synced_bytes"}``."""
        with self.rw.exclusive(), self.state:
            n, b = len(self.unsynced), sum(r.written for r in self.unsynced.values())
            for key, rec in list(self.unsynced.items()):
                with contextlib.suppress(OSError):
                    os.fsync(rec.fd)
                self._forget(key)
            self.counters["checkpoints"] += 1
            return {"synced_files": n, "synced_bytes": b}


# ---------------------------------------------------------------------------------------------- control

_ALIASES = {"lazyfs::clear-cache": "crash", "clear-cache": "crash", "lazyfs::cache-checkpoint": "checkpoint",
            "lazyfs::unsynced-data-report": "report"}


def answer(ops: _LazyOps, line: str) -> dict:
    """The reply to one command line: a JSON object ``{"cmd": ...}`` or a bare name (LazyFS's FIFO names are
    accepted, :data:`_ALIASES`). Unknown commands get ``{"ok": false, "error"}``."""
    line = line.strip()
    try:
        cmd = json.loads(line).get("cmd", "") if line.startswith("{") else line
    except ValueError:
        cmd = ""
    cmd = _ALIASES.get(cmd, cmd)
    try:
        if cmd == "ping":
            return {"ok": True, "pid": os.getpid()}
        if cmd in ("crash", "checkpoint", "report"):
            return {"ok": True, **getattr(ops, cmd)()}
    except OSError as e:
        return {"ok": False, "error": f"{cmd}: {e}"}
    return {"ok": False, "error": f"unknown command {line[:80]!r}; use crash, checkpoint, report or ping"}


def _serve_control(ops: _LazyOps, path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn, conn.makefile("rw") as f:
                try:
                    line = f.readline()
                    f.write(json.dumps(answer(ops, line)) + "\n")
                    f.flush()
                except OSError:
                    continue

    threading.Thread(target=loop, name="lazyfs-control", daemon=True).start()
    return srv


def request(control: Path | str, cmd: str, timeout_s: float = 30.0) -> dict:
    """Send ``cmd`` (``crash``, ``checkpoint``, ``report``, ``ping``) to the layer listening on ``control`` and
    return its reply. Raises ``OSError`` when no layer answers, ``RuntimeError`` with the layer's error."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(control))
        s.sendall((json.dumps({"cmd": cmd}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    out = json.loads(buf or b"{}")
    if not out.get("ok"):
        raise RuntimeError(f"lazyfs {cmd}: {out.get('error', 'no answer')}")
    return out


# ---------------------------------------------------------------------------------------------- the process

def _die_with_parent(parent: int) -> None:
    """SIGTERM (not SIGKILL: libfuse then unmounts) when the process that started us dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if parent and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onceproof.backends.common.lazyfs",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--backing", help="the real directory the files live in")
    ap.add_argument("--mount", help="where to mount the layer (an empty directory)")
    ap.add_argument("--control", required=True, help="the Unix socket to serve commands on")
    ap.add_argument("--parent-pid", type=int, default=0, help="exit (and unmount) when this process dies")
    ap.add_argument("--debug", action="store_true", help="libfuse's debug output")
    ap.add_argument("--request", choices=["crash", "checkpoint", "report", "ping"],
                    help="instead of serving: send this command to the layer on --control and print its reply "
                         "(one JSON line; the ssh backend's way to reach a layer on a node)")
    a = ap.parse_args(argv)
    if a.request:
        try:
            print(json.dumps(request(a.control, a.request)))
        except (OSError, RuntimeError, ValueError) as e:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            return 1
        return 0
    if not a.backing or not a.mount:
        ap.error("--backing and --mount are required to serve a layer")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s lazyfs %(levelname)s %(message)s")
    if a.parent_pid:
        _die_with_parent(a.parent_pid)
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one fd per open file and per unsynced file
    except (ImportError, ValueError, OSError):
        pass
    why = unavailable()
    if why:
        print(f"lazyfs: {why}", file=sys.stderr)
        return 2
    ops = operations_class()(a.backing)
    srv = _serve_control(ops, a.control)
    log.info("mounting %s over %s, control %s", a.mount, ops.root, a.control)
    try:
        fuse_class()(ops, os.path.abspath(a.mount), foreground=True, nothreads=False, debug=a.debug,
                     fsname=FSNAME, subtype=FSNAME, default_permissions=True)
    except RuntimeError as e:
        if ops.mounted_at is None:  # libfuse never got to init: the mount itself failed
            print(f"lazyfs: mounting {a.mount} failed (libfuse's fuse_main returned {e}; see above)",
                  file=sys.stderr)
            return 1
        # fuse_main returns non-zero when a signal ended its loop (its handler records the signal): a normal end
    finally:
        srv.close()
        with contextlib.suppress(OSError):
            os.unlink(a.control)
        rep = ops.report()
        log.info("unmounted %s; %d files had unsynced writes (%d bytes) at the end, kept", a.mount,
                 rep["unsynced_files"], rep["unsynced_bytes"])
    return 0


# ---------------------------------------------------------------------------------------------- the handle

@dataclass
class Layer:
    """One layer process as the harness sees it: ``backing`` (the real directory), ``mount`` (where the broker
    writes), ``control`` (its socket), ``log_path`` (its stdout and stderr). :meth:`start` spawns it tied to
    this process (``backends/common/processes.spawn``; the layer itself asks for SIGTERM when its parent dies,
    so that it unmounts) and notes the mount for the reaper; :meth:`stop` unmounts on every path."""

    backing: Path
    mount: Path
    control: Path
    log_path: Path
    proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = READY_S) -> None:
        """Mount: waits until the mount shows in ``/proc/self/mountinfo`` and the layer answers ``ping``.

        Raises: ``RuntimeError`` naming the fix (:func:`unavailable`) or quoting the layer's log when it
        does not come up within ``timeout_s`` s (the process is then stopped)."""
        from onceproof.backends.common import processes
        why = unavailable()
        if why:
            raise RuntimeError(f"cannot start the lazyfs layer: {why}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        if mounted(self.mount):  # a layer of an earlier, killed process
            unmount(self.mount)
        note(self.mount)
        argv = [sys.executable, "-m", "onceproof.backends.common.lazyfs", "--backing", str(self.backing),
                "--mount", str(self.mount), "--control", str(self.control), "--parent-pid", str(os.getpid())]
        env = dict(os.environ)
        from onceproof.checkout import IMPORT_ROOT
        env["PYTHONPATH"] = str(IMPORT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = processes.spawn(argv, log_path=self.log_path, env=env, tie_to_parent=False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if mounted(self.mount):
                with contextlib.suppress(OSError, RuntimeError, ValueError):
                    request(self.control, "ping", timeout_s=2.0)
                    return
            time.sleep(0.05)
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        raise RuntimeError(f"the lazyfs layer at {self.mount} did not come up in {timeout_s:.0f} s:\n{tail}")

    def crash(self) -> dict:
        """Drop the unsynced writes (:meth:`LazyOps.crash`'s evidence). Raises ``OSError`` / ``RuntimeError``."""
        return request(self.control, "crash")

    def report(self) -> dict:
        """What a crash would drop now (:meth:`LazyOps.report`)."""
        return request(self.control, "report")

    def checkpoint(self) -> dict:
        """Make everything written so far durable (:meth:`LazyOps.checkpoint`)."""
        return request(self.control, "checkpoint")

    def stop(self, grace_s: float = 5.0) -> bool:
        """SIGTERM the layer (it unmounts), SIGKILL after ``grace_s`` s, then detach whatever is still
        mounted (:func:`unmount`). Safe twice. Returns True when nothing of ours is mounted at :attr:`mount`."""
        p = self.proc
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
        return unmount(self.mount)


def throughput(path: Path, total_mb: int = 200, write_kb: int = 16, sync_every_kb: int = 1024) -> float:
    """Write ``total_mb`` MiB to the new file ``path`` in ``write_kb`` KiB writes with an ``fsync`` every
    ``sync_every_kb`` KiB (and one at the end), remove it, and return MB/s (10^6 bytes per second)."""
    buf = os.urandom(write_kb * 1024)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    t0 = time.monotonic()
    since = 0
    try:
        for _ in range(total_mb * 1024 // write_kb):
            os.write(fd, buf)
            since += write_kb
            if since >= sync_every_kb:
                os.fsync(fd)
                since = 0
        os.fsync(fd)
    finally:
        os.close(fd)
    dt = time.monotonic() - t0
    os.unlink(path)
    return total_mb * 1024 * 1024 / dt / 1e6


if __name__ == "__main__":
    raise SystemExit(main())
