"""``lose-unsynced-writes`` on a node of ``--backend ssh``: the same FUSE layer as the local backend's
(``backends/common/lazyfs.py``, Jepsen's LazyFS semantics) run on the broker's node under its ``log.dirs``.

What is shipped per run, into ``<run>/lazyfs/`` on the node: ``lazyfs.py`` itself (standard library at module
level) and ``mfusepy.py`` (its one dependency, a single pure-Python file over ctypes). What the node must have:
``/dev/fuse``, libfuse 3 (Debian/Ubuntu: ``apt-get install fuse3``) and root (``become``; in a container
``CAP_SYS_ADMIN`` and ``--device /dev/fuse``). The layer is started by the node helper as ``lazyfs-<i>``
(tagged with the run, so the sweep kills it, and the sweep then detaches its mount: ``onceproof-node.py``);
the harness talks to it with ``lazyfs.py --control SOCKET --request CMD`` on the node.

The layer is mounted by root without ``allow_other``: only root may use the mount, so the broker's storage is
formatted as root too (the broker runs as root through ``become`` anyway).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path, PurePosixPath

from onceproof.backends.common import lazyfs
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.remote import RemoteError

READY_S = 20.0
"""How long :meth:`RemoteLayer.start` waits for the layer to answer ``ping`` (s)."""


class LayerError(RuntimeError):
    """The layer could not be started or did not answer; the message names the node and quotes its log."""


class RemoteLayer:
    """Broker ``i``'s layer on the node behind ``helper``: mounted at ``kdir/data`` over ``kdir/disk``, its
    control socket ``kdir/lazyfs.sock``, its log ``kdir/lazyfs-<i>.log``."""

    def __init__(self, helper: NodeHelper, kdir: PurePosixPath, i: int):
        self.helper, self.kdir, self.i = helper, kdir, i
        self.lib = helper.run_dir / "lazyfs"
        self.name = f"lazyfs-{i}"
        self.mount, self.backing = kdir / "data", kdir / "disk"
        self.control, self.log = kdir / "lazyfs.sock", kdir / f"lazyfs-{i}.log"

    def ship(self) -> None:
        """Copy ``lazyfs.py`` and ``mfusepy.py`` to the run's ``lazyfs/`` on the node. Raises ``RemoteError``;
        ``LayerError`` when mfusepy is not installed here (onceproof's dependencies have it)."""
        try:
            import mfusepy
        except ImportError:
            raise LayerError(f"mfusepy is not installed here: {lazyfs.FIX}") from None
        r = self.helper.remote
        r.run(["mkdir", "-p", str(self.lib)], timeout_s=30).check()
        for src in (Path(lazyfs.__file__), Path(mfusepy.__file__)):
            r.put(src, self.lib / src.name)

    def start(self, timeout_s: float = READY_S) -> None:
        """Mount the layer (the backing and mount directories made first) and wait until it answers ``ping``.
        Raises ``LayerError`` quoting its log (no ``/dev/fuse``, no libfuse 3, the mount refused)."""
        h = self.helper
        h.remote.run(["mkdir", "-p", str(self.backing), str(self.mount)], timeout_s=30).check()
        argv = ["python3", str(self.lib / "lazyfs.py"), "--backing", str(self.backing), "--mount", str(self.mount),
                "--control", str(self.control)]
        h.start(self.name, argv, log=self.log, env={"PYTHONPATH": str(self.lib)})
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                if self.request("ping").get("ok"):
                    return
            except LayerError as e:
                last = str(e)
            if h.status(self.name).get("state") == "gone":
                break
            time.sleep(0.5)
        tail = h.remote.run(["tail", "-c", "1500", str(self.log)], timeout_s=15, root=h.root_commands).stdout
        raise LayerError(f"the lazyfs layer of broker {self.i} on {h.remote.name} did not come up in "
                         f"{timeout_s:.0f} s ({last or 'no answer'}): {tail.strip()}")

    def request(self, cmd: str) -> dict:
        """Send ``cmd`` (``crash``, ``report``, ``checkpoint``, ``ping``) to the layer; its reply. Raises
        ``LayerError`` (no layer answering, the layer's own error, the node unreachable)."""
        h = self.helper
        try:
            done = h.remote.run(["python3", str(self.lib / "lazyfs.py"), "--control", str(self.control),
                                 "--request", cmd], timeout_s=60, root=h.root_commands)
        except RemoteError as e:
            raise LayerError(str(e)) from None
        try:
            out = json.loads((done.stdout.strip().splitlines() or ["{}"])[-1])
        except ValueError:
            raise LayerError(f"[{h.remote.name}] lazyfs --request {cmd}: {(done.stderr or done.stdout)[-300:]}") \
                from None
        if "error" in out:
            raise LayerError(f"[{h.remote.name}] lazyfs --request {cmd}: {out['error']}")
        return out

    def report(self) -> dict:
        """What a crash would drop now (``lazyfs.LazyOps.report``). Raises ``LayerError``."""
        return self.request("report")

    def crash(self) -> dict:
        """Drop the unsynced writes (``lazyfs.LazyOps.crash``'s evidence). Raises ``LayerError``."""
        return self.request("crash")

    def stop(self) -> None:
        """SIGTERM the layer (it unmounts itself); the node's sweep detaches a mount it left. Never raises."""
        with contextlib.suppress(RemoteError):
            self.helper.signal(self.name, "TERM")
