"""Running one of Kafka's command-line tools (``kafka-tools``: what the distribution's ``bin/kafka-*.sh``
start) against a cluster, as an operator does: ``java -cp <kafka-tools> <class> --bootstrap-server <b> ...``
(:func:`onceproof.backends.common.jars.kafka_tools_classpath`). Its callers (``clients/reassign.py``,
``clients/features.py``) read the exit code and output and raise their own errors."""

from __future__ import annotations

import subprocess

from onceproof.backends.common import jars


def run(tool: str, bootstrap: str, args: list[str], timeout_s: float, version: str = "") -> tuple[int, str]:
    """Run ``tool`` (a class name) of ``version``'s kafka-tools (default: the pin) with ``--bootstrap-server
    bootstrap`` and ``args``, within ``timeout_s`` seconds, stdin closed. Returns ``(exit code, stdout and
    stderr stripped)``.

    Raises: ``subprocess.TimeoutExpired`` after ``timeout_s``; ``jars.ResolveError`` when the tools cannot be
    resolved or there is no java."""
    argv = [jars.java_binary(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp",
            jars.kafka_tools_classpath(version).as_java(), tool, "--bootstrap-server", bootstrap, *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    return p.returncode, (p.stdout + p.stderr).strip()
