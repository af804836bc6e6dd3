"""Row ranges for working through a long column a block at a time: the checker's memory bound. A whole-
column temporary (an int64 copy, a float per row, a mask) costs 8 bytes a row, 80 MiB at 10M records;
taken a block at a time it costs the block's."""

from __future__ import annotations

from collections.abc import Iterator

ROWS = 1 << 20
"""The default block: 1,048,576 rows, 8 MiB of int64 temporaries."""


def row_blocks(n: int, size: int = ROWS) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` row ranges of ``size`` rows (the last one shorter) covering ``0..n``, in order;
    none when ``n`` is 0. Raises ``ValueError`` for a ``size`` below 1."""
    if size < 1:
        raise ValueError(f"a block needs at least 1 row, got {size}")
    return ((a, min(n, a + size)) for a in range(0, n, size))
