"""The shared executor freeze of the local and Docker backends (``backends/common/spark.py``) on a real
process and a real loopback socket: a frozen process cannot read what its peer sends, and the bytes it
has not read are seen in its own socket table (``/proc/<pid>/net/tcp``), as ``kill-executor`` needs to
see a task launch on a frozen executor. The peer stands in for the driver, the child for an executor JVM
(its command line names the driver's URL as Spark's executor's does). No Spark, no Kafka: about 1 s.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil
import pytest

from onceproof.backends.base import Executor
from onceproof.backends.common.spark import SupervisedSpark

pytestmark = pytest.mark.cluster

READER = ("import socket, sys\ns = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
          "while s.recv(65536):\n    pass\n")


def _until(f, timeout_s: float = 5.0):
    deadline = time.monotonic() + timeout_s
    while True:
        v = f()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.01)


def test_a_frozen_executor_keeps_what_the_driver_sent_unread_until_it_is_thawed():
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", READER, str(port), "--driver-url",
                              f"spark://CoarseGrainedScheduler@127.0.0.1:{port}", "--executor-id", "7"])
    spark = SupervisedSpark()
    try:
        conn, _ = srv.accept()
        ex = Executor("7", child.pid, psutil.Process(child.pid).create_time())
        conn.sendall(b"x" * 5000)
        assert _until(lambda: spark.executor_unread_bytes(ex) == 0), "a running reader left bytes unread"
        assert spark.freeze_executor(ex)
        assert _until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED)
        conn.sendall(b"y" * 9770)
        assert _until(lambda: spark.executor_unread_bytes(ex) == 9770), spark.executor_unread_bytes(ex)
        spark.thaw_executor(ex)
        assert _until(lambda: spark.executor_unread_bytes(ex) == 0), "the thawed reader did not read"
        reused = Executor("7", child.pid, ex.started - 10)  # the pid now names another process
        assert not spark.freeze_executor(reused) and spark.executor_unread_bytes(reused) is None
        assert psutil.Process(child.pid).status() != psutil.STATUS_STOPPED
    finally:
        child.kill()
        child.wait(10)
        srv.close()
    gone = Executor("7", child.pid, ex.started)
    assert not spark.freeze_executor(gone) and spark.executor_unread_bytes(gone) is None
    spark.thaw_executor(gone)  # no-op, no error
