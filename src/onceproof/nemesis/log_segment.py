"""A Kafka log segment as ``corrupt-segment-tail`` sees it: the record batches of a ``.log`` file, the tail
to garble, chosen from a seeded RNG, and the garbling itself. Pure: bytes, file names and an RNG in, plans and
bytes out (:func:`apply` alone touches a file, through a :class:`onceproof.backends.base.LogDir`).

Format (Kafka's message format v2, "Record Batch", https://kafka.apache.org/documentation/#recordbatch, and
``DefaultRecordBatch``): a segment is batches back to back, each ``baseOffset`` int64, ``batchLength`` int32
(the bytes after this field), ``partitionLeaderEpoch`` int32, ``magic`` int8 (2), ``crc`` uint32 (CRC-32C of
``attributes`` to the end), ``attributes`` int16 (bit 4 transactional, bit 5 control), ``lastOffsetDelta``
int32, ``baseTimestamp`` int64, ``maxTimestamp`` int64, ``producerId`` int64, ``producerEpoch`` int16,
``baseSequence`` int32, ``records`` int32 count, then the records: :data:`HEADER` bytes before the first. A
control batch's one record has the key ``version`` int16, ``type`` int16 (0 abort, 1 commit: the
transaction markers, KIP-98 ``ControlRecordType``). A segment file is named by its base offset, 20 digits
(``LogFileUtils``); the active segment is the one with the highest.

What the broker does with a garbled tail (Kafka 4.1.1, ``LogSegment.recover`` and ``LogLoader.recoverLog``):
after an unclean shutdown it recovers every segment from its recovery point on, the active one included;
``recover`` reads batch after batch and calls ``ensureValid``, whose CRC check fails at the first garbled
batch (:func:`plan` keeps that batch's header intact, so its length still spans the file and the CRC is what
fails); it logs ``Found invalid messages in log segment <file> at byte offset <batch start>.`` and truncates
the file there, and ``LogLoader`` logs ``Corruption found in segment <base>, truncating to offset <batch's
base offset>`` and deletes any later segment.
"""

from __future__ import annotations

import random
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onceproof.backends.base import LogDir

LOG_OVERHEAD = 12
"""``baseOffset`` and ``batchLength``: the bytes of a batch before its length counts (``Records.LOG_OVERHEAD``)."""
HEADER = 61
"""A v2 batch's bytes before its first record (``DefaultRecordBatch.RECORD_BATCH_OVERHEAD``)."""
TAIL_BATCHES = 8
"""The garbling starts in one of the segment's last this many batches."""
CONTROL_TYPES = {0: "abort", 1: "commit"}
_SEGMENT = re.compile(r"^(\d{20})\.log$")


@dataclass(frozen=True)
class Batch:
    """One record batch of a segment: where it lies (``start``, ``size`` in bytes, its log overhead included),
    its offsets (``base_offset`` .. ``last_offset``), whether it is transactional or a control batch and, for a
    control batch, its marker (``"commit"``, ``"abort"``, or ``"other"``)."""

    start: int
    size: int
    base_offset: int
    last_offset: int
    magic: int
    transactional: bool = False
    control: bool = False
    marker: str | None = None
    producer_id: int = -1


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's ``ByteUtils.readVarint``/``readVarlong``) at ``pos``: ``(value, next pos)``.

    Raises: ``ValueError`` when it runs past the data or past 10 bytes."""
    shift = raw = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _marker(data: bytes, start: int, end: int) -> str:
    """The control type of the control batch's first record in ``data[start:end]`` (``"other"`` when unread)."""
    try:
        pos = start + HEADER
        _, pos = _varint(data, pos)  # record length
        pos += 1  # attributes
        _, pos = _varint(data, pos)  # timestamp delta
        _, pos = _varint(data, pos)  # offset delta
        klen, pos = _varint(data, pos)
        if klen < 4 or pos + 4 > end:
            return "other"
        _, ctype = struct.unpack_from(">hh", data, pos)
    except (ValueError, struct.error):
        return "other"
    return CONTROL_TYPES.get(ctype, "other")


def batches(data: bytes) -> tuple[list[Batch], int]:
    """The whole batches of segment bytes ``data``, in order, and the number of bytes after the last of them
    (a torn batch, or a length that cannot be one: the walk stops there, as Kafka's would)."""
    out: list[Batch] = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        size = LOG_OVERHEAD + length
        if length < HEADER - LOG_OVERHEAD or pos + size > len(data):
            break
        magic = data[pos + 16]
        attrs, last_delta = struct.unpack_from(">hi", data, pos + 21)
        pid = struct.unpack_from(">q", data, pos + 43)[0]
        control = bool(attrs & 0x20) and magic >= 2
        out.append(Batch(pos, size, base, base + last_delta, magic, bool(attrs & 0x10) and magic >= 2, control,
                         _marker(data, pos, pos + size) if control else None, pid))
        pos += size
    return out, len(data) - pos


def segment_base(path: Path) -> int | None:
    """The base offset a segment file's name gives (``00000000000000001234.log`` → 1234); ``None`` otherwise."""
    m = _SEGMENT.match(Path(path).name)
    return int(m.group(1)) if m else None


def active_segment(names: list[str]) -> str | None:
    """The active (last) segment among a partition directory's file ``names``: the ``.log`` with the highest
    base offset; ``None`` without one."""
    logs = [n for n in names if segment_base(n) is not None]
    return max(logs, key=segment_base, default=None)


def hosted_partitions(names: list[str], topic: str) -> list[int]:
    """The partitions of ``topic`` among the entry ``names`` of a broker's log directory (``<topic>-<p>``),
    ascending (directories being deleted or moved, ``-delete`` / ``-future`` / ``-stray`` suffixes, are not)."""
    pat = re.compile(rf"^{re.escape(topic)}-(\d+)$")
    return sorted(int(m.group(1)) for n in names if (m := pat.match(n)))


@dataclass
class Garble:
    """What :func:`plan` chose: bytes ``[start, end)`` of a segment of ``size_before`` bytes are garbled; they
    begin in batch ``batch_index`` (of ``batches_in_file``), which starts at byte ``batch_start`` with offset
    ``base_offset``. ``offsets_garbled``: ``[base_offset, last offset in the file]``; ``markers_garbled``:
    the transaction markers in the range (``{"commit": n, "abort": n}``); ``at_txn_boundary``: the batch opens
    a transaction of its producer (the producer's previous batch in the file is a marker, or there is none)
    or is not transactional, so the cut leaves no transaction of that producer without its marker."""

    size_before: int
    start: int
    end: int
    batch_index: int
    batches_in_file: int
    batch_start: int
    base_offset: int
    offsets_garbled: list[int]
    data_batches_garbled: int
    markers_garbled: dict[str, int] = field(default_factory=dict)
    at_txn_boundary: bool = False

    @property
    def bytes_garbled(self) -> int:
        return self.end - self.start

    def evidence(self) -> dict:
        """JSON-able, with ``bytes_garbled``."""
        return {**asdict(self), "bytes_garbled": self.bytes_garbled}


def _opens(found: list[Batch], i: int) -> bool:
    """Batch ``i`` is not transactional, or its producer's previous batch in ``found`` is a marker (or none)."""
    if not found[i].transactional:
        return True
    prev = next((b for b in reversed(found[:i]) if b.producer_id == found[i].producer_id), None)
    return prev is None or prev.control


def plan(found: list[Batch], size: int, rng: random.Random, tail: int = TAIL_BATCHES) -> Garble | None:
    """Choose what to garble in a segment of ``size`` bytes whose whole batches are ``found``: a batch among
    the last ``tail`` (a data batch that starts a transaction when there is one, else any data batch, else the
    last batch), then a byte inside its records (after its :data:`HEADER`, so its length still spans the file
    and its CRC check is what fails), from which everything to the end of the file is garbled. ``None`` when
    the segment has no batch. Deterministic in ``rng``."""
    if not found:
        return None
    first = max(0, len(found) - tail)
    idx = range(first, len(found))
    data = [i for i in idx if not found[i].control]
    bounds = [i for i in data if _opens(found, i)]
    i = rng.choice(bounds or data or [len(found) - 1])
    b = found[i]
    body = max(1, b.size - HEADER)
    start = min(b.start + HEADER + rng.randrange(body), b.start + b.size - 1)
    gone = found[i:]
    markers = {"commit": 0, "abort": 0}
    for x in gone:
        if x.control and x.marker in markers:
            markers[x.marker] += 1
    return Garble(size_before=size, start=start, end=size, batch_index=i, batches_in_file=len(found),
                  batch_start=b.start, base_offset=b.base_offset,
                  offsets_garbled=[b.base_offset, max(x.last_offset for x in gone)],
                  data_batches_garbled=sum(1 for x in gone if not x.control), markers_garbled=markers,
                  at_txn_boundary=_opens(found, i))


def garbled(data: bytes, g: Garble, rng: random.Random) -> bytes:
    """``data[g.start:g.end]`` with every byte changed: XORed with a non-zero byte from ``rng``."""
    n = g.end - g.start
    mask = bytes(x or 0xA5 for x in rng.randbytes(n))
    old = int.from_bytes(data[g.start:g.end], "big")
    return (old ^ int.from_bytes(mask, "big")).to_bytes(n, "big")


def apply(log_dir: LogDir, rel: str, g: Garble, rng: random.Random) -> None:
    """Write :func:`garbled` bytes over ``[g.start, g.end)`` of the segment file ``rel`` of ``log_dir`` in place
    (its size is kept), fsynced.

    Raises: ``ValueError`` when the file no longer has ``g.size_before`` bytes; ``OSError`` from the file."""
    data = log_dir.read(rel)
    if len(data) != g.size_before:
        raise ValueError(f"{log_dir.where(rel)} has {len(data)} bytes, not the {g.size_before} planned from")
    log_dir.write_at(rel, g.start, garbled(data, g, rng))
