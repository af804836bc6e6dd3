"""Anomaly examples as plain JSON-able dicts: the few rows a result shows, never the hot path."""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_EXAMPLES = 10


def isna(v) -> bool:
    """``pd.isna`` for one value, false for values it cannot judge (lists, dicts)."""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def plain(v):
    """numpy scalars → Python ``int`` / ``float``; anything else unchanged."""
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def records(df: pd.DataFrame, cols: list[str], limit: int = MAX_EXAMPLES) -> list[dict]:
    """The first ``limit`` rows of ``df[cols]`` as dicts without NA fields; ``op.`` prefixes dropped."""
    return [{k.removeprefix("op."): plain(v) for k, v in rec.items() if not isna(v)}
            for rec in df[cols].head(limit).to_dict("records")]
