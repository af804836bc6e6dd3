"""Is Linux's ``sch_netem`` (delay, reorder, duplicate; tc-netem(8)) usable here? Detection only.

onceproof does not apply netem: a netem qdisc on ``lo`` delays every loopback packet of the host (other
runs' clusters included); aiming it at one broker's ports needs a ``prio`` qdisc with ``u32`` filters in
front of it, which is not implemented. So ``lossy-link`` offers no delay/reorder/duplicate target, and
:func:`unavailable` says why, for ``onceproof faults`` and for the evidence of every ``lossy-link`` turn.

The probe (once per process) adds ``netem delay 1ms`` to ``lo`` in a scratch network namespace
(``ip netns add onceproof-netem-<pid>``), so nothing outside it is touched, and deletes the namespace.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess

_cache: dict[str, str] = {}
NOT_APPLIED = ("onceproof does not apply netem: a qdisc on lo would delay every loopback packet of this host "
               "(other runs' clusters too)")


def unavailable() -> str:
    """Why ``lossy-link`` has no netem target here: the kernel has no ``sch_netem`` (with ``tc``'s own error),
    the probe could not run (no ``tc``/``ip``, not root), or, where netem works, :data:`NOT_APPLIED`."""
    if "r" not in _cache:
        _cache["r"] = _probe()
    return _cache["r"]


def _probe() -> str:
    tc, ip = shutil.which("tc"), shutil.which("ip")
    if tc is None or ip is None:
        return "sch_netem not probed: no `tc`/`ip` on PATH (iproute2)"
    if os.geteuid() != 0:
        return f"sch_netem not probed: tc needs root (uid {os.geteuid()})"
    ns = f"onceproof-netem-{os.getpid()}"
    try:
        made = subprocess.run([ip, "netns", "add", ns], capture_output=True, text=True, timeout=10)
        if made.returncode != 0:
            return f"sch_netem not probed: `ip netns add` failed: {made.stderr.strip()}"
        p = subprocess.run([ip, "netns", "exec", ns, tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            return (f"sch_netem is not in this kernel ({platform.release()}): `tc qdisc add dev lo root netem` "
                    f"in a scratch namespace said: {(p.stderr or p.stdout).strip()}")
        return "sch_netem works here, but " + NOT_APPLIED
    except (OSError, subprocess.SubprocessError) as e:
        return f"sch_netem not probed: {e}"
    finally:
        subprocess.run([ip, "netns", "del", ns], capture_output=True, timeout=10)
