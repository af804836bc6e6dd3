"""Port leases: two local clusters on one machine (two runs, or a run beside ``cluster up``) never pick
the same ports.

A free-port test happens ~10 s before the brokers bind. So a base port is *leased* under a lock: one
file per base in ``<cache>/ports/`` naming the ports, the owner process and (once started) the brokers
and the cluster directory. A lease is held while its owner or one of its brokers is alive (pid and start
time match); otherwise it is reclaimed. ``KafkaCluster.down`` releases it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

import psutil

from onceproof.backends.base import ClusterError
from onceproof.backends.cache import cache_dir
from onceproof.backends.common.layout import ClusterSpec

log = logging.getLogger("onceproof.kafka")


def port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def ports_dir() -> Path:
    """Directory of the port leases: ``$ONCEPROOF_CACHE/ports`` (default ``~/.cache/onceproof/ports``)."""
    return cache_dir() / "ports"


@contextlib.contextmanager
def _ports_lock():
    d = ports_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield d
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _proc_id(pid: int) -> dict | None:
    try:
        return {"pid": pid, "start": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None


def _proc_alive(p: dict) -> bool:
    try:
        proc = psutil.Process(int(p["pid"]))
        return abs(proc.create_time() - float(p["start"])) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def lease_alive(lease: dict) -> bool:
    """True while the lease's owner process or one of its brokers is alive (same pid and start time)."""
    return any(_proc_alive(p) for p in [lease.get("owner") or {}, *(lease.get("brokers") or [])])


def _leases(d: Path) -> dict[int, dict]:
    out = {}
    for f in d.glob("*.json"):
        try:
            lease = json.loads(f.read_text())
            out[int(lease["base"])] = lease
        except (OSError, ValueError, KeyError, TypeError):
            f.unlink(missing_ok=True)  # a torn lease (writer killed mid-write) protects nothing
    return out


def _write_lease(d: Path, lease: dict) -> None:
    p = d / f"{lease['base']}.json"
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(lease, indent=2))
    os.replace(tmp, p)


def free_base_port(nodes: int = 3, start: int = 19090, step: int = 500, tries: int = 20,
                   proxied: bool = False) -> int:
    """Reserve and return the first base port from ``start`` (in steps of ``step``) whose every cluster
    port (see :meth:`ClusterSpec.ports`) is free on 127.0.0.1 and not leased to another live cluster.

    The lease names this process as owner; :class:`KafkaCluster` adds its brokers and directory when it
    starts them and releases the lease in :meth:`KafkaCluster.down` (or :func:`release_base_port`). A
    lease whose owner and brokers are all dead is reclaimed.

    When the lease directory cannot be written (a read-only cache), the ports are only tested, as
    before leases, with a warning.

    Raises: ``ClusterError`` when no range is free.
    """
    try:
        with _ports_lock() as d:
            return _reserve(d, nodes, start, step, tries, proxied)
    except OSError as e:
        log.warning("port leases unavailable (%s): testing ports without reserving them", e)
        return _reserve(None, nodes, start, step, tries, proxied)


def _reserve(d: Path | None, nodes: int, start: int, step: int, tries: int, proxied: bool) -> int:
    held: set[int] = set()
    for base, lease in (_leases(d) if d is not None else {}).items():
        if lease_alive(lease):
            held.update(int(p) for p in lease.get("ports") or ())
        else:
            (d / f"{base}.json").unlink(missing_ok=True)
    for i in range(tries):
        base = start + i * step
        ports = ClusterSpec(Path("."), nodes, base, proxied=proxied).ports()
        if held.isdisjoint(ports) and all(port_free(p) for p in ports):
            if d is not None:
                _write_lease(d, {"base": base, "ports": ports, "owner": _proc_id(os.getpid()), "brokers": [],
                                 "dir": None, "created": time.time()})
            return base
    raise ClusterError(f"no free port range from {start} (step {step}, {tries} tries): stop other clusters "
                       f"(`onceproof cluster down`) or remove dead leases in {ports_dir()}")


def release_base_port(base: int, data_dir: Path | None = None) -> bool:
    """Drop the lease of ``base`` if this process owns it, it belongs to the cluster in ``data_dir``, or it
    is dead. Returns whether a lease was dropped.

    Raises: ``OSError`` when the lease directory cannot be written.
    """
    with _ports_lock() as d:
        lease = _leases(d).get(base)
        if lease is None:
            return False
        mine = (lease.get("owner") or {}).get("pid") == os.getpid()
        same_dir = data_dir is not None and lease.get("dir") == str(Path(data_dir).resolve())
        if mine or same_dir or not lease_alive(lease):
            (d / f"{base}.json").unlink(missing_ok=True)
            return True
        return False


def claim_base_port(spec: ClusterSpec, broker_pids: list[int]) -> None:
    """Record the cluster's directory and broker pids in its lease (creating the lease when the cluster
    was given a base port by hand), so the lease outlives the process that reserved it."""
    with _ports_lock() as d:
        lease = _leases(d).get(spec.base_port)
        ours = lease is not None and ((lease.get("owner") or {}).get("pid") == os.getpid()
                                      or lease.get("dir") == str(spec.data_dir.resolve()))
        if lease is not None and lease_alive(lease) and not ours:
            log.warning("ports from %d are leased to %s; not taking over its lease", spec.base_port, lease.get("dir"))
            return
        lease = lease or {"base": spec.base_port, "owner": _proc_id(os.getpid()), "created": time.time()}
        lease.update(ports=spec.ports(), dir=str(spec.data_dir.resolve()),
                     brokers=[p for p in (_proc_id(pid) for pid in broker_pids) if p])
        _write_lease(d, lease)
