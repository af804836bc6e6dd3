"""A process's own clock, offset at run time through libfaketime's control file; the host's clock is never
changed. For ``clock-skew`` (``nemesis/clock.py``).

libfaketime (libfaketime README, 0.9.10, sections 4a, 4d, 4e, "Cleaning up shared memory") is an
``LD_PRELOAD`` library that intercepts ``clock_gettime``, ``gettimeofday``, ``time`` and reports the real
time plus an offset. What a process started with :func:`env` gets:

* ``LD_PRELOAD=<libfaketime.so.1>`` (:func:`library`);
* ``FAKETIME_TIMESTAMP_FILE=<offset file>``: one line, the same text as the ``FAKETIME`` variable would hold;
  a relative offset is ``+N`` / ``-N`` seconds (suffixes ``m``, ``h``, ``d``, ``y`` multiply). The file is
  re-read at run time, so rewriting it (:func:`write_offset`) moves the clock of a running process;
* ``FAKETIME_CACHE_DURATION=1``: the file is read again at most :data:`CACHE_S` s after the last read (the
  default is 10 s; ``FAKETIME_NO_CACHE=1`` would read it on every clock call, a cost the README warns of);
* ``FAKETIME_DONT_FAKE_MONOTONIC=1``: ``CLOCK_MONOTONIC`` stays real. The README: "Java-/JVM-based
  applications work but you need to pass in an extra argument (FAKETIME_DONT_FAKE_MONOTONIC). Without this
  argument the java command usually hangs." The JVM's ``System.nanoTime``, its sleeps and timed waits, stay
  real; ``System.currentTimeMillis`` and ``Instant.now`` move;
* ``FAKETIME_FORCE_MONOTONIC_FIX=0``: the library's "monotonic fix" (README section 2, a glibc workaround it
  switches on by itself for the glibc versions it assumes need it) stays off. With it on, every timed wait of
  the JVM returned at once: ``Object.wait(10)`` twenty times took 0.06 ms instead of 200 ms, so each timed
  wait spun, and a KRaft cluster started so never kept a quorum leader (elections for 2 minutes, then the
  run's health check gave up: the first run of the clock test, 2026-11-27). With it off, 200 ms, and
  ``System.currentTimeMillis`` cost 167 ns a call instead of 1136 ns (42 ns without the library);
* ``NO_FAKE_STAT=1``: file timestamps (``stat``) stay real: Kafka's segment files keep the kernel's times;
* no ``FAKETIME``: that variable "always has priority over the files".

Seen on this host (Debian 12's libfaketime 0.9.10, OpenJDK 17.0.15, 2 cores): a JVM started with these
printed ``currentTimeMillis`` +120.1 s, then -59.9 s, then real again within ≤ 1 s of each rewrite of the file
(+120, -60, +0), while ``nanoTime`` went on unbroken and ``Thread.sleep(500)`` slept 0.5 s; with the monotonic
fix off, ``Object.wait(500)`` waited 0.5 s by ``nanoTime`` at offsets +0, +60 and -60.

Shared memory: the first process that loads the library creates ``/dev/shm/faketime_shm_<pid>`` and
``/dev/shm/sem.faketime_sem_<pid>`` and removes them when it exits normally; a SIGKILLed process leaves them
(the README: delete them "manually (or properly automated)"). :func:`remove_stale_shm` removes those of dead
processes; the local cluster calls it after it stops brokers, and the reaper after a SIGKILLed harness.

Offset files a run uses are noted in its run directory (:func:`note`, :data:`NOTED`), so that the reaper can
put them back to ``+0`` (:func:`reset_noted`). The skewed processes themselves never outlive the harness:
they are tied to it (``processes.spawn``'s ``PR_SET_PDEATHSIG``) and swept by the reaper.
"""

from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path

import psutil

LIB_ENV = "ONCEPROOF_FAKETIME_LIB"
"""Names a ``libfaketime.so.1`` elsewhere than the distribution's places."""
LIB_GLOBS = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
             "/usr/local/lib/faketime/libfaketime.so.1")
"""Where Debian/Ubuntu (multiarch), other distributions and libfaketime's own ``make install`` put it."""
CACHE_S = 1
"""``FAKETIME_CACHE_DURATION``: a rewritten offset reaches the process within this many seconds."""
NOTED = "clock-files.txt"
"""In the run directory: the offset files the run's processes read (one path a line)."""
FIX = "make clock-prereqs (Debian/Ubuntu: apt-get install libfaketime), or set ONCEPROOF_FAKETIME_LIB"

_OFFSET = re.compile(r"^\s*([+-])\s*(\d+(?:\.\d+)?)\s*([smhdy]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}


def library() -> Path | None:
    """The ``libfaketime.so.1`` to preload: ``$ONCEPROOF_FAKETIME_LIB`` when set (even if missing: then
    ``None``), else the first of :data:`LIB_GLOBS` that exists; ``None`` when there is none."""
    named = os.environ.get(LIB_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    for pattern in LIB_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return Path(hits[0])
    return None


def unavailable() -> str | None:
    """``None`` when a process can be started under libfaketime here, else why not and the fix."""
    named = os.environ.get(LIB_ENV)
    if library() is None:
        where = f"{LIB_ENV}={named} is not a file" if named else f"no libfaketime.so.1 in {', '.join(LIB_GLOBS)}"
        return f"libfaketime is not installed ({where}): {FIX}"
    return None


def format_offset(seconds: float) -> str:
    """The offset file's line for ``seconds`` (whole seconds: libfaketime's fraction delimiter depends on the
    locale, README 4e): ``+0``, ``+60``, ``-90``.

    Raises: ``ValueError`` for a fractional, infinite or NaN offset."""
    if not math.isfinite(seconds) or seconds != int(seconds):
        raise ValueError(f"a clock offset is whole seconds, got {seconds!r}")
    s = int(seconds)
    return f"+{s}" if s >= 0 else str(s)


def parse_offset(text: str) -> float:
    """Seconds of a relative offset line as libfaketime reads it (``+60``, ``-2m``, ``+1.5h``; README 4d);
    an empty file is ``0`` (the real time).

    Raises: ``ValueError`` for anything else (an absolute date, a speed-up ``x2``: not written here)."""
    text = text.strip()
    if not text:
        return 0.0
    m = _OFFSET.match(text)
    if m is None:
        raise ValueError(f"not a relative libfaketime offset: {text!r} (want +N or -N seconds, e.g. +60)")
    sign, num, unit = m.groups()
    return (-1 if sign == "-" else 1) * float(num) * _UNIT_S[unit]


def write_offset(path: Path, seconds: float) -> None:
    """Set the offset file ``path`` to ``seconds`` (:func:`format_offset`), atomically (a temporary file
    renamed over it: the library never reads half a line). Raises ``ValueError``, ``OSError``."""
    line = format_offset(seconds) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(line)
    os.replace(tmp, path)


def read_offset(path: Path) -> float:
    """The offset (s) that ``path`` sets; ``0`` when it does not exist. Raises ``ValueError`` (its content)."""
    try:
        return parse_offset(path.read_text())
    except FileNotFoundError:
        return 0.0


def env(offset_file: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process whose clock follows ``offset_file``: ``base`` (default ``os.environ``)
    without ``FAKETIME``, plus the variables of the module docstring; libfaketime goes first in
    ``LD_PRELOAD``, after it whatever ``base`` preloads.

    Raises: ``RuntimeError`` naming the fix when libfaketime is not installed (:func:`unavailable`)."""
    lib = library()
    if lib is None:
        raise RuntimeError(unavailable())
    out = {k: v for k, v in (os.environ if base is None else base).items() if k != "FAKETIME"}
    out.update(preload_vars(str(lib), str(offset_file), out.get("LD_PRELOAD", "")))
    return out


def preload_vars(lib: str, offset_file: str, preloaded: str = "") -> dict[str, str]:
    """Only the variables of the module docstring, for a process started on another machine (the ssh
    backend's nodes): ``lib`` and ``offset_file`` are paths there; ``preloaded`` is what the process would
    preload anyway (after libfaketime). Pure."""
    return {"LD_PRELOAD": " ".join(p for p in (lib, preloaded) if p), "FAKETIME_TIMESTAMP_FILE": offset_file,
            "FAKETIME_CACHE_DURATION": str(CACHE_S), "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0", "NO_FAKE_STAT": "1"}


def note(path: Path) -> None:
    """Note offset file ``path`` in the current run's :data:`NOTED` list (the run of ``$ONCEPROOF_RUN``;
    nothing outside a run), for :func:`reset_noted`."""
    run = os.environ.get("ONCEPROOF_RUN")
    if run and Path(run).is_dir():
        with open(Path(run) / NOTED, "a") as f:
            f.write(f"{path}\n")


def reset_noted(run_dir: str) -> list[str]:
    """Put every offset file of ``run_dir``'s :data:`NOTED` list that exists back to ``+0``; returns those
    reset. Never raises."""
    try:
        lines = (Path(run_dir) / NOTED).read_text().splitlines()
    except OSError:
        return []
    done = []
    for line in dict.fromkeys(x.strip() for x in lines if x.strip()):
        p = Path(line)
        try:
            if p.exists() and read_offset(p) != 0:
                write_offset(p, 0)
                done.append(line)
        except (OSError, ValueError):
            continue
    return done


def remove_stale_shm(shm_dir: Path = Path("/dev/shm")) -> list[str]:
    """Remove libfaketime's ``faketime_shm_<pid>`` / ``sem.faketime_sem_<pid>`` of processes that no longer
    exist (module docstring); returns the names removed. Never raises."""
    gone = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    for name in names:
        m = re.fullmatch(r"(?:faketime_shm_|sem\.faketime_sem_)(\d+)", name)
        if m is None or psutil.pid_exists(int(m.group(1))):
            continue
        try:
            os.unlink(shm_dir / name)
            gone.append(name)
        except OSError:
            continue
    return gone
