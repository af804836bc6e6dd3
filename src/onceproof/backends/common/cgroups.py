"""A cgroup (v2) of its own per local broker, so that iptables can tell one broker's outbound connections
from another's on loopback (``partition:isolate`` cutting the isolated broker's own replica fetches).

Why: on the local backend every broker connects from 127.0.0.1 with ephemeral ports, and its fetches go
through the other brokers' ``internal-<j>`` proxies, which carry every peer's fetches; neither a proxy nor a
port rule can single one broker out. iptables' ``cgroup`` match (iptables-extensions(8): ``--path``, "match
cgroup2 membership", a path relative to the cgroup2 root) matches a socket by the cgroup v2 of the process
that created it, so a rule in ``OUTPUT`` can drop only broker ``i``'s packets to the other brokers' proxies.

What it needs: a cgroup2 hierarchy mounted (``/sys/fs/cgroup`` on a unified host, ``/sys/fs/cgroup/unified``
on a hybrid one), writable (root), and the iptables ``cgroup`` match. No controller is enabled: the groups
only name processes. A broker is moved into ``onceproof-<tag>/node<i>`` right after it is spawned, before
its JVM opens a socket; a socket keeps the cgroup it was created in.

Groups a run makes are noted in its run directory (:data:`NOTED`); :func:`remove` deletes them once their
processes are gone, and the reaper does after a SIGKILLed harness (:func:`remove_noted`).
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

NOTED = "cgroups.txt"
"""In the run directory: the cgroup directories the run made (relative to the cgroup2 root), one a line."""
PREFIX = "onceproof-"


def root(mountinfo: Path = Path("/proc/self/mountinfo")) -> Path | None:
    """The cgroup2 mount point (the first one in ``mountinfo``), ``None`` without one."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    for ln in lines:
        left, sep, right = ln.partition(" - ")
        parts = left.split()
        if sep and len(parts) >= 5 and right.split()[:1] == ["cgroup2"]:
            return Path(parts[4])
    return None


def group_of(data_dir: str, node: int) -> str:
    """The group of broker ``node`` of the cluster in ``data_dir``: ``onceproof-<8 hex>/node<i>`` (relative
    to the cgroup2 root; the same cluster, the same group)."""
    return f"{PREFIX}{hashlib.sha1(str(data_dir).encode()).hexdigest()[:8]}/node{int(node)}"


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """``None`` when processes can be put in groups here and iptables can match them, else why not (probed
    once: a scratch group made and removed, and ``iptables -m cgroup --help``)."""
    from onceproof.backends.common import iptables
    r = root()
    if r is None:
        return "no cgroup2 hierarchy is mounted (/proc/self/mountinfo)"
    probe = r / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as e:
        return f"cannot make a cgroup under {r} ({e.strerror}): run the harness as root"
    return iptables.cgroup_unavailable()


def make(group: str, run_dir: str | None = None) -> Path:
    """Make ``group`` (when missing), noted first in ``run_dir``'s :data:`NOTED` (default ``$ONCEPROOF_RUN``);
    its directory. An iptables rule can name a group only once it exists (the kernel resolves the path when
    the rule is added). Raises: ``OSError`` (no cgroup2, not root)."""
    r = root()
    if r is None:
        raise OSError("no cgroup2 hierarchy is mounted")
    run = run_dir or os.environ.get("ONCEPROOF_RUN")
    if run and Path(run).is_dir():
        with open(Path(run) / NOTED, "a") as f:
            f.write(f"{group}\n")
    d = r / group
    d.mkdir(parents=True, exist_ok=True)
    return d


def place(pid: int, group: str, run_dir: str | None = None) -> Path:
    """Move process ``pid`` (all its threads) into ``group`` (:func:`make` first). Returns the group's
    directory. Raises: ``OSError`` (no cgroup2, not root, the process gone)."""
    d = make(group, run_dir)
    (d / "cgroup.procs").write_text(str(int(pid)))
    return d


def remove(group: str) -> bool:
    """Delete ``group`` and its parent ``onceproof-<tag>`` when empty (a group with a live process stays);
    True when it is gone. Never raises."""
    r = root()
    if r is None or not group.startswith(PREFIX):
        return False
    d = r / group
    for p in (d, d.parent):
        if p == r or not p.name:
            break
        try:
            p.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            break
    return not d.exists()


def remove_noted(run_dir: str) -> list[str]:
    """:func:`remove` every group of ``run_dir``'s :data:`NOTED`; returns those removed. Never raises."""
    try:
        groups = [g.strip() for g in (Path(run_dir) / NOTED).read_text().splitlines() if g.strip()]
    except OSError:
        return []
    return [g for g in dict.fromkeys(groups) if remove(g)]
