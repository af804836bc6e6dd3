"""``onceproof ssh trust|check``: the nodes of ``--backend ssh`` (``nodes.toml``, see
``backends/ssh/inventory.py``) before any run.

* ``trust`` reads each node's host key, prints its fingerprint and adds it to ``[ssh] known_hosts`` only
  after a ``y`` typed at a terminal (``--yes`` for a script that checked the fingerprints another way);
  a key already trusted is left alone, a changed one is never replaced.
* ``check`` connects to every node with the inventory's key and known_hosts and runs what the backend
  will need there (``java -version``, ``python3``, ``sudo -n true`` when ``become = "sudo"``), one line per
  node. Exit 0 when every node passes, 1 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from onceproof.harness.cli.app import console, on_crash, usage

ssh_app = typer.Typer(no_args_is_help=True, help="The machines of --backend ssh (nodes.toml): trust, check.")
_NODES_HELP = "the nodes file (docs/backends.md, 'The ssh backend')"


def _inventory(nodes: Path):
    from onceproof.backends.ssh.inventory import InventoryError, load
    try:
        return load(nodes)
    except InventoryError as e:
        raise usage(str(e), "--nodes") from None


@ssh_app.command("trust")
def trust(nodes: Path = typer.Option(..., "--nodes", help=_NODES_HELP),
          yes: bool = typer.Option(False, "--yes", help="add every untrusted key without asking (only after "
                                   "checking the printed fingerprints out of band)")) -> None:
    """Add each node's host key to the nodes file's known_hosts, asking for each one."""
    from onceproof.backends.ssh.transport import SshError
    from onceproof.backends.ssh.transport import trust as trust_keys
    on_crash("ssh trust", None)
    inv = _inventory(nodes)
    if not yes and not sys.stdin.isatty():
        raise usage("asks before trusting a key and needs a terminal; check the fingerprints out of band and "
                    "pass --yes", "--yes")

    def confirm(node, fingerprint: str) -> bool:
        if yes:
            return True
        return typer.confirm(f"{node.name} ({node.host}:{node.port}) offers {fingerprint}. Trust it?", default=False)
    try:
        rows = trust_keys(inv, confirm)
    except SshError as e:
        console.print(str(e), soft_wrap=True)
        raise typer.Exit(1) from None
    for name, fp, what in rows:
        console.print(f"{name:<10} {fp}  {what}")
    console.print(f"known_hosts: {inv.ssh.known_hosts}")


@ssh_app.command("check")
def check(nodes: Path = typer.Option(..., "--nodes", help=_NODES_HELP)) -> None:
    """Connect to every node and check what the ssh backend needs there (Java 17+, Python 3, sudo), and say
    whether it has libfaketime (the clock faults; optional: without it they are skipped)."""
    from onceproof.backends.ssh import clock
    from onceproof.backends.ssh.transport import SshError, SshHub
    on_crash("ssh check", None)
    inv = _inventory(nodes)
    failed = 0
    with SshHub(inv) as hub:
        for r in hub.remotes():
            try:
                java = r.run(["java", "-version"], timeout_s=30)
                py = r.run(["python3", "-c", "import platform; print(platform.python_version())"], timeout_s=30)
                sudo = r.run(["true"], timeout_s=15, root=True) if inv.ssh.become == "sudo" else None
                lib = clock.find_library(r)
            except SshError as e:
                failed += 1
                console.print(f"{r.name:<10} FAIL {e}", soft_wrap=True)
                continue
            jv = (java.stderr.splitlines() or ["?"])[0] if java.returncode == 0 else f"no java (exit {java.returncode})"
            pv = py.stdout.strip() if py.returncode == 0 else f"no python3 (exit {py.returncode})"
            sv = "" if sudo is None else (" sudo ok" if sudo.returncode == 0 else " sudo -n refused")
            ok = java.returncode == 0 and py.returncode == 0 and (sudo is None or sudo.returncode == 0)
            failed += not ok
            fv = " libfaketime ok" if lib else " no libfaketime (clock faults skipped: apt-get install libfaketime)"
            console.print(f"{r.name:<10} {'ok  ' if ok else 'FAIL'} {jv}; python {pv};{sv};{fv}", soft_wrap=True)
    if failed:
        raise typer.Exit(1)
