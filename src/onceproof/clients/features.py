"""Kafka's feature levels (KIP-584, ``metadata.version`` in KRaft, KIP-778), read and finalized with the
``kafka-features`` tool (``org.apache.kafka.tools.FeatureCommand``, in ``kafka-tools`` from 3.6), as Kafka's
upgrade docs say to finish a rolling upgrade: "Once the cluster's behavior and performance has been
verified, finalize the upgrade by running ``bin/kafka-features.sh --bootstrap-server localhost:9092 upgrade
--release-version X.Y``".

:func:`finalize` asks for ``metadata.version`` only (``upgrade --metadata X.Y``, as Kafka's own
``tests/kafkatest/tests/core/kraft_upgrade_test.py`` does), not ``--release-version``: that one also raises
``kraft.version`` and so turns a static quorum (``controller.quorum.voters``, this harness's) into a dynamic
one for good (KAFKA-21426). The other features (``transaction.version``, ``group.version``) stay where the
oldest release left them; :func:`describe` shows them.

The tool is run, not re-implemented: its output is what an operator reads.
"""

from __future__ import annotations

import re
import subprocess

from onceproof.clients import kafka_tools

TOOL = "org.apache.kafka.tools.FeatureCommand"
TIMEOUT_S = 60.0
"""The longest one tool run may take, s (a JVM start and one Admin request: about 2 s here)."""


class FeatureError(RuntimeError):
    """The tool exited non-zero or did not answer (its exit code and last output in the message)."""


def _run(bootstrap: str, version: str, *args: str) -> str:
    try:
        code, out = kafka_tools.run(TOOL, bootstrap, list(args), TIMEOUT_S, version)
    except subprocess.TimeoutExpired as e:
        raise FeatureError(f"kafka-features {args[0]} did not answer within {TIMEOUT_S:.0f} s") from e
    if code != 0:
        raise FeatureError(f"kafka-features {' '.join(args)} exited {code}: {out[-600:]}")
    return out


def parse_describe(text: str) -> dict[str, str]:
    """``kafka-features describe`` output → ``{feature: finalized level}`` (the level as printed:
    ``"3.5-IV2"`` for ``metadata.version``, ``"2"`` for the others). Pure. Lines look like ``Feature:
    metadata.version\\tSupportedMinVersion: 3.0-IV1\\tSupportedMaxVersion: 4.1-IV1\\tFinalizedVersionLevel:
    3.5-IV2\\tEpoch: 12``."""
    out = {}
    for line in text.splitlines():
        m = re.search(r"Feature:\s*(\S+).*?FinalizedVersionLevel:\s*(\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def describe(bootstrap: str, tools_version: str = "") -> dict[str, str]:
    """The cluster's finalized feature levels (:func:`parse_describe`), read with ``tools_version``'s tool
    (default: the pinned one).

    Raises: :class:`FeatureError`; ``jars.ResolveError`` when the tools cannot be resolved."""
    return parse_describe(_run(bootstrap, tools_version, "describe"))


def finalize(bootstrap: str, release: str, tools_version: str = "") -> str:
    """Raise ``metadata.version`` to ``release``'s (``X.Y.Z`` → ``upgrade --metadata X.Y``: that line's newest
    level), with ``tools_version``'s tool, which must know that level (the release itself, or a newer one).
    Returns the tool's output (≤ 600 characters).

    Raises: :class:`FeatureError` (the controller refused it, or no answer); ``jars.ResolveError``."""
    line = ".".join(release.split(".")[:2])
    return _run(bootstrap, tools_version, "upgrade", "--metadata", line)[-600:]
