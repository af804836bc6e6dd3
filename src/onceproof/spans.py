"""Integer ids written for people to read, as spans: ``[1, 2, 3, 5]`` → ``"1–3, 5"``. Used where a
message or a table names many batch ids or seeds (the file sink's missing log files, the soak summary's
seeds)."""

from __future__ import annotations

from collections.abc import Iterable


def spans(ids: Iterable[int]) -> str:
    """``[1, 2, 3, 5, 7, 8]`` → ``"1–3, 5, 7–8"``: runs of consecutive ids joined by an en dash, the
    runs by ``", "``. The ids are sorted and de-duplicated first; ``""`` when there are none."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in runs)
