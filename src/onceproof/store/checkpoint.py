"""Read a Spark Structured Streaming checkpoint: the offset log and the commit log.

Layout (Spark's ``HDFSMetadataLog``, one file per batch): ``offsets/<N>`` is written before batch N
runs — line 1 ``v1``, line 2 the batch metadata JSON, then one line per source with that source's end
offsets (the Kafka source writes ``{"<topic>": {"<partition>": <offset>, ...}}``); ``commits/<N>`` is
written after the sink finished batch N. ``offsets/N`` without ``commits/N`` means batch N will be
replayed with the same offsets on restart.
"""

from __future__ import annotations

import json
from pathlib import Path


def _batches(d: Path) -> list[int]:
    if not d.exists():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def latest_offset_batch(checkpoint: Path) -> int | None:
    """Highest N with ``offsets/N``, or ``None``."""
    b = _batches(checkpoint / "offsets")
    return b[-1] if b else None


def latest_commit(checkpoint: Path) -> int | None:
    """Highest N with ``commits/N``, or ``None``."""
    b = _batches(checkpoint / "commits")
    return b[-1] if b else None


def has_offsets(checkpoint: Path, batch: int) -> bool:
    return (checkpoint / "offsets" / str(batch)).exists()


def has_commit(checkpoint: Path, batch: int) -> bool:
    return (checkpoint / "commits" / str(batch)).exists()


def batch_times(checkpoint: Path, batch: int) -> tuple[float | None, float | None]:
    """When batch ``batch`` was planned and committed: the mtimes (epoch s) of ``offsets/N`` and
    ``commits/N``, ``None`` for a missing file."""
    out = []
    for d in ("offsets", "commits"):
        try:
            out.append((checkpoint / d / str(batch)).stat().st_mtime)
        except OSError:
            out.append(None)
    return out[0], out[1]


def source_offsets(checkpoint: Path, batch: int) -> dict[str, dict[int, int]]:
    """End offsets of batch ``batch`` per topic and partition (``{topic: {partition: offset}}``).

    Raises: ``FileNotFoundError`` when ``offsets/<batch>`` does not exist; ``ValueError`` when it is not
    in the format above.
    """
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    if len(lines) < 3 or lines[0] != "v1":
        raise ValueError(f"{checkpoint}/offsets/{batch}: unexpected offset-log format")
    out: dict[str, dict[int, int]] = {}
    for line in lines[2:]:
        if line.strip() in ("", "-"):
            continue
        for topic, parts in json.loads(line).items():
            out.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return out


def committed_offsets(checkpoint: Path) -> dict[str, dict[int, int]]:
    """End offsets of the latest batch whose commit log entry exists (empty before the first)."""
    n = latest_commit(checkpoint)
    return source_offsets(checkpoint, n) if n is not None else {}


def batch_timestamp_ms(checkpoint: Path, batch: int) -> int | None:
    """``batchTimestampMs`` of batch ``batch``: the driver's wall clock when it planned the batch (line 2 of
    ``offsets/N``, Spark's ``OffsetSeqMetadata``); ``None`` when the file or the field is missing."""
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return int(json.loads(lines[1])["batchTimestampMs"])
    except (OSError, IndexError, KeyError, ValueError, TypeError):
        return None
