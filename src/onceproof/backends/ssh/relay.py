"""The run's files kept in step between the harness's run directory and the Spark nodes' (``--backend ssh``
needs no shared file system): the control files of the pipeline's hooks, the sink's event log, the driver's
log and the checkpoint's offset and commit logs.

What goes which way (``pipeline/hooks.py`` classifies every control file):

* control files only the harness writes (``hooks.HARNESS_WRITES``: a nemesis switching a hook) go to every
  Spark node; when a node consumes one (the driver removes ``kill-in-commit-window.armed``, a task renames
  ``precommit-hold-ms`` to ``.claimed-...``), the harness's copy goes too; when the harness removes one (a
  heal), the nodes' copies go;
* every other control file is the pipeline's and comes back from the node that wrote it; a file the node
  removed is removed here, and one the harness removed here is removed there;
* append-only logs (``sink.jsonl`` from every node, ``logs/driver-*.log`` from the driver node) come back by
  offset, whole lines only;
* ``checkpoint/{offsets,commits,sources,metadata}`` come back from the driver node (``state/`` never: it is
  large and only the query reads it), each with its mtime on the node (when Spark wrote it there, not when
  the relay copied it).

:func:`plan` is the decision, pure and tested on synthetic listings; :class:`RunFilesRelay` lists each node
once per poll (one ``find`` over SSH), plans and copies.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from onceproof.backends.ssh.remote import Remote, RemoteError
from onceproof.pipeline import hooks
from onceproof.store import runfiles

CHECKPOINT_DIRS = ("offsets", "commits", "sources", "metadata")
"""The checkpoint's parts the harness reads (the offset log, the commit log; Spark's checkpoint layout)."""
APPEND = (runfiles.SINK,)
"""Files the relay copies by offset (append-only)."""


@dataclass(frozen=True)
class Entry:
    """A file as a listing saw it: size (bytes) and modification time (s since the epoch, the node's clock)."""

    size: int
    mtime: float


@dataclass(frozen=True)
class Action:
    """One copy or removal. ``kind``: ``push`` (harness → node), ``pull`` (node → harness, whole),
    ``append`` (node → harness from ``offset``), ``delete-remote``, ``delete-local``; ``path`` is relative
    to the run directory on both sides."""

    kind: str
    path: str
    offset: int = 0


@dataclass
class SyncState:
    """What the relay last did per file of one node: the remote entry it pulled, the local entry it pushed,
    and how far it has appended."""

    pulled: dict[str, Entry] = field(default_factory=dict)
    pushed: dict[str, Entry] = field(default_factory=dict)
    appended: dict[str, int] = field(default_factory=dict)


def _harness_owned(path: str) -> bool:
    return path.startswith("control/") and path.split("/", 1)[1] in hooks.HARNESS_WRITES


def plan(local: dict[str, Entry], remote: dict[str, Entry], state: SyncState) -> list[Action]:
    """The actions that bring one node and the harness in step (see the module docstring). ``local`` and
    ``remote`` list the files the relay manages, by path relative to the run directory. Pure."""
    out: list[Action] = []
    for path in sorted(set(local) | set(remote) | set(state.pulled) | set(state.pushed)):
        here, there = local.get(path), remote.get(path)
        if path in APPEND or path.startswith("logs/"):
            if there is not None and there.size > state.appended.get(path, 0):
                out.append(Action("append", path, state.appended.get(path, 0)))
            continue
        if _harness_owned(path):
            sent = state.pushed.get(path)
            if here is not None and sent != here:
                out.append(Action("push", path))
            elif here is None and sent is not None and there is not None:
                out.append(Action("delete-remote", path))
            elif here is not None and sent == here and there is None:
                out.append(Action("delete-local", path))  # the node consumed it
            continue
        got = state.pulled.get(path)
        if there is not None and got != there:
            out.append(Action("pull", path))
        elif there is not None and got == there and here is None:
            out.append(Action("delete-remote", path))  # the harness removed its copy
        elif there is None and got is not None and here is not None:
            out.append(Action("delete-local", path))  # the node removed it
    return out


def apply_done(action: Action, local: dict[str, Entry], remote: dict[str, Entry], state: SyncState,
               appended_to: int | None = None) -> None:
    """Record a performed ``action`` in ``state`` (``appended_to``: the new offset of an ``append``). Pure."""
    p = action.path
    if action.kind == "push":
        state.pushed[p] = local[p]
    elif action.kind == "pull":
        state.pulled[p] = remote[p]
    elif action.kind == "append":
        state.appended[p] = appended_to if appended_to is not None else remote[p].size
    elif action.kind in ("delete-remote", "delete-local"):
        state.pulled.pop(p, None)
        state.pushed.pop(p, None)


def parse_listing(text: str) -> dict[str, Entry]:
    """``find -printf '%P\\t%s\\t%T@\\n'`` output → ``{path: Entry}``. Pure."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            with contextlib.suppress(ValueError):
                out[parts[0]] = Entry(int(parts[1]), float(parts[2]))
    return out


def local_listing(run_dir: Path) -> dict[str, Entry]:
    """The harness's side of what the relay manages."""
    out = {}
    for sub in ("control",):
        d = run_dir / sub
        for f in d.iterdir() if d.is_dir() else ():
            if f.is_file():
                st = f.stat()
                out[f"{sub}/{f.name}"] = Entry(st.st_size, st.st_mtime)
    return out


class RunFilesRelay:
    """Keeps ``local_run`` (the harness's run directory) and each node's ``remote_run`` in step.

    Args:
        remotes: the Spark nodes (driver node and workers), by name.
        remote_run: the run directory on every node (the same path on each).
        local_run: the harness's run directory.
        driver: the name of the driver node (whose checkpoint and driver log come back).
        poll_s: seconds between two passes of :meth:`start`'s thread.
    """

    def __init__(self, remotes: dict[str, Remote], remote_run: PurePosixPath, local_run: Path, driver: str,
                 poll_s: float = 0.3):
        self.remotes, self.remote_run, self.local_run, self.driver = remotes, remote_run, local_run, driver
        self.poll_s = poll_s
        self.states = {name: SyncState() for name in remotes}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _remote_listing(self, name: str) -> dict[str, Entry]:
        parts = ["control", "logs", *(f"checkpoint/{d}" for d in CHECKPOINT_DIRS)] if name == self.driver else \
            ["control"]
        script = ('cd "$1" 2>/dev/null || exit 0; shift; for d in "$@"; do [ -d "$d" ] && find "$d" -maxdepth 1 '
                  "-type f -printf '%p\\t%s\\t%T@\\n'; done; [ -f sink.jsonl ] && find sink.jsonl -printf "
                  "'%p\\t%s\\t%T@\\n'; exit 0")
        done = self.remotes[name].run(["sh", "-c", script, "sh", str(self.remote_run), *parts], timeout_s=30)
        return parse_listing(done.stdout)

    def sync_once(self) -> int:
        """One pass over every node; the number of actions performed. Errors are kept in :attr:`errors` and
        the pass goes on with the next node."""
        n = 0
        with self._lock:
            for name, remote in self.remotes.items():
                try:
                    n += self._sync_node(name, remote)
                except RemoteError as e:
                    self.errors.append(str(e))
        return n

    def _sync_node(self, name: str, remote: Remote) -> int:
        remote_list = self._remote_listing(name)
        local_list = local_listing(self.local_run)
        if name != self.driver:  # a worker has no checkpoint or driver log, and its sink log is its own
            remote_list = {p: e for p, e in remote_list.items() if p.startswith("control/") or p in APPEND}
        state = self.states[name]
        actions = plan(local_list, remote_list, state)
        for a in actions:
            here, there = self.local_run / a.path, self.remote_run / a.path
            new_offset = None
            if a.kind == "push":
                remote.run(["mkdir", "-p", str(there.parent)], timeout_s=30)
                remote.put(here, there)
            elif a.kind == "pull":
                here.parent.mkdir(parents=True, exist_ok=True)
                tmp = here.with_name(here.name + ".relay")
                remote.get(there, tmp)
                got = remote_list.get(a.path)
                if got is not None:  # the node's mtime: when Spark wrote it there (driver-clock-skew reads it)
                    os.utime(tmp, (got.mtime, got.mtime))
                tmp.replace(here)
            elif a.kind == "append":
                text = remote.run(["tail", "-c", f"+{a.offset + 1}", str(there)], timeout_s=60).stdout
                whole = text[: text.rfind("\n") + 1] if "\n" in text else ""
                if whole:
                    here.parent.mkdir(parents=True, exist_ok=True)
                    with open(here, "a") as f:
                        f.write(whole)
                new_offset = a.offset + len(whole.encode())
            elif a.kind == "delete-remote":
                remote.run(["rm", "-f", str(there)], timeout_s=30)
            elif a.kind == "delete-local":
                here.unlink(missing_ok=True)
            apply_done(a, local_list, remote_list, state, new_offset)
        return len(actions)

    def start(self) -> RunFilesRelay:
        """Sync every :attr:`poll_s` seconds in a daemon thread until :meth:`stop`."""
        def loop() -> None:
            while not self._stop.wait(self.poll_s):
                self.sync_once()
        self._thread = threading.Thread(target=loop, name="ssh-relay", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and make one last pass (bounded by the commands' deadlines)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.sync_once()
