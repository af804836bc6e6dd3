"""Removes a run's containers and network when the process that started them dies without doing it
(SIGKILL, OOM, a crashed interpreter): testcontainers' Ryuk, as a host process.

Containers, unlike the local backend's processes, do not die with the harness (there is no
``PR_SET_PDEATHSIG`` for them). So a run's cluster starts this watcher first:
``python -m onceproof.backends.docker.reaper --run <id> --pid <harness pid> --start <its start time>``, in its own
session. It polls the harness once a second; when the harness is gone it removes everything labelled
``org.onceproof.run=<id>`` (:meth:`onceproof.backends.docker.site.DockerSite.sweep`, logs saved) and exits. A run
that tears down normally stops its reaper (:func:`onceproof.backends.docker.site.stop_reaper`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import docker
from onceproof.backends.common import processes
from onceproof.backends.docker.engine import docker_host
from onceproof.backends.docker.layout import DockerLayout
from onceproof.backends.docker.site import API_TIMEOUT_S, DockerSite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m onceproof.backends.docker.reaper", description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the run id (label org.onceproof.run)")
    ap.add_argument("--pid", type=int, required=True, help="the process whose death triggers the sweep")
    ap.add_argument("--start", type=float, required=True, help="its start time (epoch s, psutil create_time)")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while processes.same_process_alive(a.pid, a.start):
        time.sleep(1.0)
    client = docker.DockerClient(base_url=docker_host(), version="auto", timeout=API_TIMEOUT_S)
    left = DockerSite(client, DockerLayout(a.run, 0, 0)).sweep()
    for line in left:
        print(f"reaper: left behind: {line}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
