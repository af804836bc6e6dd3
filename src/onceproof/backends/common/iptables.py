"""Random packet loss on loopback with iptables' ``statistic`` match, for ``lossy-link:drop``; and one
broker's own outbound packets cut with the ``cgroup`` match, for ``partition:isolate`` (:func:`install_cut`).

Driven through the ``iptables`` binary with :mod:`subprocess` (no Python library: ``python-iptables``
binds libiptc, which the nf_tables flavour of iptables 1.8 no longer uses; the command line is the same for
both flavours). Every call passes ``-w`` (wait for the xtables lock: another run may change its own rules
at the same moment) and is bounded by :data:`TIMEOUT_S`.

What one run installs (rule syntax: iptables(8) and iptables-extensions(8), "statistic": ``--mode random
--probability p`` matches a packet with probability ``p``, 0 ≤ p ≤ 1; a rule without ``-j`` only counts):

* a chain of its own, :func:`chain_name` of the run directory (``OP-<8 hex>``), holding for each port
  ``P`` a counting rule ``-p tcp --dport P`` followed by
  ``-p tcp --dport P -m statistic --mode random --probability p -j DROP``;
* one jump to it at the head of ``INPUT``: ``-i lo -p tcp -j OP-<8 hex>`` (loopback traffic traverses
  ``OUTPUT`` then ``INPUT``; ``INPUT`` sees each packet once, on its way to the listening socket).

The chain's name is written to the run directory's :data:`NOTE` *before* it is created, so that the
process reaper (``backends/common/reaper.py``) removes the chain and its jump when the harness is
SIGKILLed; :func:`remove` does it otherwise. Only chains named :data:`PREFIX`… are ever removed.

Evidence comes from the rules' own packet counters (``iptables -S <chain> -v`` prints ``-c <packets>
<bytes>`` on each rule): packets seen on the ports and packets dropped.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

PREFIX = "OP-"
"""Every chain of onceproof's starts so; nothing else is ever removed."""
NOTE = "iptables-chains.txt"
"""In the run directory: the chains the run made (one name a line), for the reaper."""
TIMEOUT_S = 10.0
"""Bound of one ``iptables`` call, seconds."""
HOOK = "INPUT"
"""The built-in chain that jumps to a loss chain."""
CUT_HOOK = "OUTPUT"
"""The built-in chain that jumps to a cut chain (:func:`install_cut`): it sees the sending process's socket."""

_COUNTED = re.compile(r"^-A (?P<chain>\S+) (?P<rule>.*?) -c (?P<packets>\d+) (?P<bytes>\d+)(?P<tail>.*)$")


class IptablesError(RuntimeError):
    """An ``iptables`` call failed; the message has the command and what it printed."""


def chain_name(run_dir: str) -> str:
    """``OP-`` and the first 8 hex digits of the SHA-1 of ``run_dir`` (11 characters; iptables allows 28):
    the same run, the same chain; two runs, two chains."""
    return PREFIX + hashlib.sha1(str(run_dir).encode()).hexdigest()[:8]


def _check_chain(chain: str) -> None:
    if not re.fullmatch(re.escape(PREFIX) + r"[0-9a-z-]{1,25}", chain):
        raise ValueError(f"{chain!r} is not a chain of onceproof's: use chain_name(run_dir) ({PREFIX}<8 hex>)")


def rules(chain: str, ports: list[int], probability: float) -> list[list[str]]:
    """The ``iptables`` arguments (after ``iptables -w``) that fill ``chain``: per port a counting rule and
    a random drop with ``probability`` (0 < p < 1).

    Raises: ``ValueError`` for a probability outside (0, 1), a port outside 1..65535, no port, or a chain
    name not made by :func:`chain_name`.
    """
    _check_chain(chain)
    if not 0.0 < probability < 1.0:
        raise ValueError(f"drop probability must be in (0, 1), not {probability}: e.g. 0.1 drops one packet in ten")
    if not ports or any(not 1 <= int(p) <= 65535 for p in ports):
        raise ValueError(f"ports must be TCP ports 1..65535, got {ports}")
    out = []
    for p in ports:
        match = ["-p", "tcp", "--dport", str(int(p))]
        out.append(["-A", chain, *match])
        out.append(["-A", chain, *match, "-m", "statistic", "--mode", "random", "--probability", f"{probability:g}",
                    "-j", "DROP"])
    return out


def cut_rules(chain: str, group: str, ports: list[int]) -> list[list[str]]:
    """The ``iptables`` arguments that fill a cut ``chain``: per port a counting rule and a drop of the TCP
    packets to it sent by processes of the cgroup v2 ``group`` (``-m cgroup --path``, relative to the cgroup2
    root; ``backends/common/cgroups.py``).

    Raises: ``ValueError`` for no port, a port outside 1..65535, an empty group, or a chain not made by
    :func:`chain_name`."""
    _check_chain(chain)
    if not ports or any(not 1 <= int(p) <= 65535 for p in ports):
        raise ValueError(f"ports must be TCP ports 1..65535, got {ports}")
    if not group or group.startswith("/") or ".." in group.split("/"):
        raise ValueError(f"a cgroup path relative to the cgroup2 root, got {group!r}")
    out = []
    for p in ports:
        match = ["-p", "tcp", "--dport", str(int(p)), "-m", "cgroup", "--path", group]
        out.append(["-A", chain, *match])
        out.append(["-A", chain, *match, "-j", "DROP"])
    return out


def cut_jump_rule(chain: str) -> list[str]:
    """The jump into a cut ``chain``: ``OUTPUT -o lo -p tcp -j <chain>``."""
    _check_chain(chain)
    return [CUT_HOOK, "-o", "lo", "-p", "tcp", "-j", chain]


def install_cut(chain: str, group: str, ports: list[int]) -> list[str]:
    """Create ``chain`` with :func:`cut_rules` and jump to it from the head of ``OUTPUT``; returns its rules
    as ``iptables -S`` prints them. ``group`` must exist (``cgroups.make``): the kernel resolves it when the
    rule is added. Noted first; a half-made chain is removed before the error is raised.

    Raises: ``IptablesError``; ``ValueError`` as :func:`cut_rules`."""
    return _install(chain, cut_rules(chain, group, ports), cut_jump_rule(chain))


def cgroup_unavailable() -> str | None:
    """``None`` when iptables here has the ``cgroup`` match with ``--path``, else why not."""
    if _binary() is None:
        return "no iptables binary on PATH (apt-get install iptables)"
    try:
        p = _run(["-m", "cgroup", "--help"], check=False)
    except IptablesError as e:
        return str(e)
    return None if "--path" in p.stdout else "this iptables has no cgroup match with --path (iptables ≥ 1.6)"


def jump_rule(chain: str) -> list[str]:
    """The jump into ``chain`` (without ``-I``/``-A``/``-D``): ``INPUT -i lo -p tcp -j <chain>``."""
    _check_chain(chain)
    return [HOOK, "-i", "lo", "-p", "tcp", "-j", chain]


def parse_counters(text: str) -> list[dict]:
    """The rules of ``iptables -S <chain> -v`` output: ``[{"rule": str, "packets": int, "bytes": int,
    "drop": bool}]`` in order (``-N``/``-P`` lines and lines without counters are left out)."""
    out = []
    for line in text.splitlines():
        m = _COUNTED.match(line.strip())
        if m:
            rule = (m["rule"] + m["tail"]).strip()
            out.append({"rule": rule, "packets": int(m["packets"]), "bytes": int(m["bytes"]),
                        "drop": rule.endswith("-j DROP")})
    return out


def summarize(counted: list[dict]) -> dict:
    """``{"seen": packets the counting rules saw, "dropped": packets the drop rules dropped}``."""
    return {"seen": sum(r["packets"] for r in counted if not r["drop"]),
            "dropped": sum(r["packets"] for r in counted if r["drop"])}


def _binary() -> str | None:
    return shutil.which("iptables") or next((p for p in ("/usr/sbin/iptables", "/sbin/iptables") if os.path.exists(p)),
                                            None)


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    binary = _binary()
    if binary is None:
        raise IptablesError("no iptables binary on PATH (apt-get install iptables)")
    cmd = [binary, "-w", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise IptablesError(f"`{' '.join(cmd)}` took over {TIMEOUT_S:.0f}s") from e
    if check and p.returncode != 0:
        raise IptablesError(f"`{' '.join(cmd)}` failed (exit {p.returncode}): {(p.stderr or p.stdout).strip()}")
    return p


_support: dict[str, str | None] = {}


def unavailable() -> str | None:
    """``None`` when this process can drop packets with iptables' statistic match, else why not (no binary,
    not root, or the kernel refused the probe rule: its error). Probed once per process, with a scratch chain
    ``OP-probe-<pid>`` made, given a statistic rule and removed again."""
    if "r" not in _support:
        _support["r"] = _probe()
    return _support["r"]


def _probe() -> str | None:
    if _binary() is None:
        return "no iptables binary on PATH (apt-get install iptables)"
    if os.geteuid() != 0:
        return f"iptables needs root (this harness runs as uid {os.geteuid()})"
    chain = f"{PREFIX}probe-{os.getpid()}"
    try:
        _run(["-N", chain])
        _run(["-A", chain, "-p", "tcp", "--dport", "9", "-m", "statistic", "--mode", "random",
              "--probability", "0.5", "-j", "RETURN"])
        return None
    except IptablesError as e:
        return f"iptables cannot add a statistic rule here: {e}"
    finally:
        _run(["-F", chain], check=False)
        _run(["-X", chain], check=False)


def note_chain(chain: str, run_dir: str | None = None) -> None:
    """Append ``chain`` to ``run_dir``'s :data:`NOTE` (default: the current run, ``$ONCEPROOF_RUN``;
    nothing outside a run)."""
    run = run_dir or os.environ.get("ONCEPROOF_RUN")
    if run and Path(run).is_dir():
        with open(Path(run) / NOTE, "a") as f:
            f.write(f"{chain}\n")


def install(chain: str, ports: list[int], probability: float) -> list[str]:
    """Create ``chain`` with :func:`rules` and jump to it from the head of ``INPUT``; returns the rules as
    ``iptables -S`` prints them. The chain is noted first (:func:`note_chain`), and a half-made chain is
    removed again before the error is raised.

    Raises: ``IptablesError`` (the failed command and its output); ``ValueError`` as :func:`rules`.
    """
    return _install(chain, rules(chain, ports, probability), jump_rule(chain))


def _install(chain: str, body: list[list[str]], jump: list[str]) -> list[str]:
    """Note ``chain``, create it with ``body`` and insert ``jump`` (``[hook, ...match, "-j", chain]``) at the
    head of its hook; its rules as ``iptables -S`` prints them. A half-made chain is removed before the
    error is raised. Raises: ``IptablesError``."""
    note_chain(chain)
    try:
        _run(["-N", chain])
        for r in body:
            _run(r)
        _run(["-I", jump[0], "1", *jump[1:]])
    except IptablesError:
        remove(chain)
        raise
    return _run(["-S", chain]).stdout.splitlines()


def counters(chain: str) -> dict:
    """``{"seen", "dropped"}`` packets of ``chain`` now (:func:`summarize`); ``{}`` when it does not exist."""
    _check_chain(chain)
    p = _run(["-S", chain, "-v"], check=False)
    return summarize(parse_counters(p.stdout)) if p.returncode == 0 else {}


def jumps_to(chain: str, hook_rules: str) -> list[list[str]]:
    """The rules of ``iptables -S <hook>`` output (``hook_rules``) that jump to ``chain``, as ``-D``
    arguments."""
    out = []
    for line in hook_rules.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0] == "-A" and parts[-2:] == ["-j", chain]:
            out.append(["-D", *parts[1:]])
    return out


def remove(chain: str) -> list[str]:
    """Remove every jump from ``INPUT`` and ``OUTPUT`` to ``chain``, flush it and delete it; safe when it is (partly)
    gone. Returns what could not be undone (empty when all went). Never raises."""
    try:
        _check_chain(chain)
    except ValueError as e:
        return [str(e)]
    errors = []
    try:
        for hook in (HOOK, CUT_HOOK):
            for d in jumps_to(chain, _run(["-S", hook]).stdout):
                _run(d)
        if _run(["-S", chain], check=False).returncode == 0:
            _run(["-F", chain])
            _run(["-X", chain])
    except IptablesError as e:
        errors.append(str(e))
    return errors


def remove_noted(run_dir: str) -> list[str]:
    """:func:`remove` every chain of ``run_dir``'s :data:`NOTE` that still exists; returns those removed.
    Never raises (the reaper's call)."""
    try:
        names = [n.strip() for n in (Path(run_dir) / NOTE).read_text().splitlines() if n.strip()]
    except OSError:
        return []
    gone = []
    for chain in dict.fromkeys(names):
        if not chain.startswith(PREFIX) or _binary() is None:
            continue
        try:
            exists = _run(["-S", chain], check=False).returncode == 0
        except IptablesError:
            continue
        if exists and not remove(chain):
            gone.append(chain)
    return gone


def leftovers(text: str | None = None) -> list[str]:
    """Chains named :data:`PREFIX`… in ``iptables -S`` output (``text``; ``None`` runs it): what a run left."""
    if text is None:
        text = _run(["-S"], check=False).stdout
    return sorted({ln.split()[1] for ln in text.splitlines() if ln.startswith("-N " + PREFIX)})
