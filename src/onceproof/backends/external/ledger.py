"""The pending-heal ledger of ``--backend external``: every fault the map injected whose ``heal`` has not
run yet, kept in the run directory (``faults-pending.json``) so that it outlives the harness (issue 28,
design §4.2).

On a cluster onceproof owns, teardown stops everything; on a user's cluster it must undo exactly what it
did: unpause the broker it paused, start the broker it killed. The ledger is written *before* the fault's
command runs (a harness killed between the two leaves an entry whose heal is harmless: unpausing a running
container, starting a started one), and an entry leaves it only after its heal succeeded. The run's
teardown, ``onceproof heal --run <dir>`` and the host-side reaper all drain it with :meth:`PendingHeals.drain`.

Writes are atomic (a temporary file, then ``os.replace``), so a reader never sees half a ledger. One
process writes it at a time (the run, or after it the reaper); a lock is not needed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from onceproof.backends.external.fault_map import Command
from onceproof.backends.ssh.remote import Completed

FILE = "faults-pending.json"
"""The ledger's name in the run directory."""


@dataclass(frozen=True)
class Pending:
    """One injected fault awaiting its heal: ``token`` (unique), the fault ``spec``, the ``heal`` command
    and when the fault was recorded (epoch s)."""

    token: str
    spec: str
    heal: Command
    time: float


class PendingHeals:
    """The ledger at ``run_dir / FILE``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / FILE

    def entries(self) -> list[Pending]:
        """The pending heals, oldest first (``[]`` when the file does not exist).

        Raises: ``ValueError`` naming the file when it is not a ledger (hand-edited, truncated)."""
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.path}: not a pending-heal ledger ({e}); its heals must be run by hand") from None
        return [Pending(token=r["token"], spec=r["spec"], time=r["time"],
                        heal=Command(argv=tuple(r["heal"]["argv"]), where=r["heal"]["where"],
                                     timeout_s=r["heal"]["timeout_s"])) for r in raw]

    def _write(self, entries: list[Pending]) -> None:
        tmp = self.path.with_name(f".{FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps([asdict(e) for e in entries], indent=1))
        os.replace(tmp, self.path)

    def add(self, spec: str, heal: Command) -> str:
        """Record that ``spec`` is about to be injected and that ``heal`` undoes it. Returns its token."""
        token = uuid.uuid4().hex[:12]
        self._write([*self.entries(), Pending(token=token, spec=spec, heal=heal, time=time.time())])
        return token

    def settle(self, token: str) -> None:
        """Remove ``token``'s entry (its heal ran and succeeded, or its fault's command failed to start)."""
        self._write([e for e in self.entries() if e.token != token])

    def drain(self, run: Callable[[Command], Completed]) -> list[tuple[Pending, Completed | Exception]]:
        """Run every pending heal, newest first (the reverse of injection), each through ``run``; an entry
        whose heal exits 0 is settled, the others stay for the next drain. Returns each entry with its
        outcome (a :class:`Completed`, or the exception ``run`` raised)."""
        out: list[tuple[Pending, Completed | Exception]] = []
        for e in reversed(self.entries()):
            try:
                done: Completed | Exception = run(e.heal)
            except Exception as x:  # noqa: BLE001 - one heal failing must not stop the others
                done = x
            if isinstance(done, Completed) and done.returncode == 0:
                self.settle(e.token)
            out.append((e, done))
        return out
