"""The committed state of a sink that writes an Apache Iceberg table: its current snapshot, read with
pyiceberg (``StaticTable`` and its scan), without Spark.

The table lives in a Hadoop (file-system) catalog whose warehouse is the run's output directory
(``pipeline/iceberg_sink.py``): ``<warehouse>/<namespace>/<table>/metadata/v<N>.metadata.json``. Such a
catalog commits by renaming a new metadata file to the next ``v<N>`` (Iceberg's
``HadoopTableOperations.commit``), and its current metadata is the highest ``v<N>`` present (what
``HadoopTableOperations.findVersion`` arrives at from ``version-hint.text``, a hint written after the
rename). pyiceberg has no Hadoop catalog, so :func:`current_metadata` finds that file (one directory
listing) and pyiceberg reads everything in it.

A data file no snapshot references (the parquet of a write that died before its commit) is in the
directory but not in the table; it is reported as an orphan. The report names the snapshot read, the
number of snapshots, and each snapshot's summary: its operation, added records, and the streaming query and
epoch that Iceberg's streaming write records (``spark.sql.streaming.queryId``/``epochId``) or the
``foreachBatch`` properties of the bundled sink.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa

from onceproof.pipeline.iceberg_sink import BATCH_PROPERTY, NAMESPACE, SINK_PROPERTY, TABLE_NAME
from onceproof.sinks import table_rows
from onceproof.sinks.base import OutputError, OutputLocation, OutputView

METADATA = "metadata"
_VERSION = re.compile(r"^v(\d+)(?:\.[a-z0-9]+)?\.metadata\.json$")
"""A Hadoop table's committed metadata file: ``v12.metadata.json`` (``v12.gz.metadata.json`` compressed)."""
SHOWN = 20
"""The latest snapshots whose summary the report keeps (all are counted)."""
SUMMARY_KEYS = {"operation": "operation", "added-records": "added_records", "total-records": "total_records",
                "spark.sql.streaming.queryId": "query_id", "spark.sql.streaming.epochId": "epoch_id",
                SINK_PROPERTY: "sink_id", BATCH_PROPERTY: "batch_id"}
"""The snapshot summary properties the report keeps, and their names there (Iceberg's spec, "Snapshot
Summary"; the streaming keys: ``SparkWrite.StreamingAppend``)."""
APPENDS = frozenset({"append"})
"""Snapshot operations that only add files: while every snapshot is one, each row's commit order is the
place of the snapshot that added its file in commit order (:func:`commit_ranks`), an order a reader sees
(incremental reads by snapshot). An ``overwrite``, ``replace`` or ``delete`` (a ``MERGE``, a compaction)
rewrites rows into new files, so the table has no commit order left and the per-key order is not
judged."""


def table_dir(warehouse: str | os.PathLike) -> Path:
    """The table's directory in a Hadoop catalog's ``warehouse``: ``<warehouse>/<namespace>/<table>``."""
    return Path(warehouse) / NAMESPACE / TABLE_NAME


def _committed(warehouse: str | os.PathLike) -> list[tuple[int, str]]:
    """``(version, file name)`` of each committed metadata file of the table in ``warehouse``, ascending;
    ``[]`` before the table exists. One directory listing."""
    try:
        names = os.listdir(table_dir(warehouse) / METADATA)
    except OSError:
        return []
    return sorted((int(m.group(1)), n) for n in names if (m := _VERSION.match(n)))


def metadata_versions(warehouse: str | os.PathLike) -> list[int]:
    """The committed metadata versions (``v<N>.metadata.json``) of the table in ``warehouse``, ascending;
    ``[]`` before the table exists. One directory listing: cheap enough to poll."""
    return [v for v, _ in _committed(warehouse)]


def current_metadata(warehouse: str | os.PathLike) -> Path | None:
    """The table's current metadata file (the highest committed version), or ``None`` when there is none."""
    committed = _committed(warehouse)
    return table_dir(warehouse) / METADATA / committed[-1][1] if committed else None


def snapshot_summaries(table) -> list[dict]:
    """Every snapshot of pyiceberg ``table`` in commit order: ``{"snapshot_id", "sequence_number",
    "timestamp_ms", and the :data:`SUMMARY_KEYS` present}``."""
    out = []
    for s in table.metadata.snapshots:
        summary = s.summary
        props = {**(summary.additional_properties if summary else {}),
                 "operation": summary.operation.value if summary else None}
        row = {"snapshot_id": s.snapshot_id, "sequence_number": s.sequence_number, "timestamp_ms": s.timestamp_ms}
        row.update({name: props[k] for k, name in SUMMARY_KEYS.items() if props.get(k) is not None})
        out.append(row)
    return out


def _rows(table, columns: list[str], appends_only: bool, added: dict[str, int]
          ) -> tuple[pa.Table, str, np.ndarray | None]:
    """The current snapshot's rows: ``(rows, order, rank)``. Appends only: its data files in the commit
    order of the snapshot that added each (``added``, :func:`live_files`; then by path), each file's rows in
    file order, ``"commit"``, and per row that rank. Else pyiceberg's scan, ``"scan"``, no rank."""
    from pyiceberg.io.pyarrow import ArrowScan  # lazy: pyiceberg is imported only when a table is read

    scan = table.scan(selected_fields=tuple(columns))
    if not appends_only:
        return scan.to_arrow(), "scan", None
    tasks = sorted(scan.plan_files(), key=lambda t: (added.get(t.file.file_path, -1), t.file.file_path))
    if not tasks:  # no snapshot yet, or nothing appended: no rows, the table's columns
        empty = pa.Table.from_batches([], schema=scan.projection().as_arrow())
        return empty, "commit", np.zeros(0, np.int64)
    reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter, scan.case_sensitive)
    parts = [reader.to_table([t]) for t in tasks]
    rank = np.repeat([added.get(t.file.file_path, -1) for t in tasks], [p.num_rows for p in parts]).astype(np.int64)
    return pa.concat_tables(parts, promote_options="permissive"), "commit", rank


def commit_ranks(table) -> dict[int, int]:
    """``{snapshot id: its place in commit order, from 1}``: the snapshots by sequence number, then by
    timestamp (a format-v1 table's sequence numbers are all 0), then as the metadata lists them."""
    snaps = sorted(enumerate(table.metadata.snapshots), key=lambda x: (x[1].sequence_number or 0,
                                                                        x[1].timestamp_ms, x[0]))
    return {s.snapshot_id: i + 1 for i, (_, s) in enumerate(snaps)}


def live_entries(table) -> list[tuple[str, int]]:
    """``(data file path, id of the snapshot that added it)`` for the current snapshot's live data files:
    pyiceberg's ``entries`` metadata table without the deleted entries (status 2) and the delete files
    (content other than 0), Iceberg's spec, "Manifests". ``[]`` without a current snapshot."""
    if table.current_snapshot() is None:
        return []
    entries = table.inspect.entries()
    data = entries.column("data_file").combine_chunks()
    rows = zip(data.field("file_path").to_pylist(), data.field("content").to_pylist(),
               entries.column("status").to_pylist(), entries.column("snapshot_id").to_pylist(), strict=True)
    return [(path, snap) for path, content, status, snap in rows if status != 2 and content == 0]


def live_files(table) -> dict[str, int]:
    """``{data file path: the commit rank (:func:`commit_ranks`) of the snapshot that added it}`` for the
    current snapshot's live data files (:func:`live_entries`)."""
    ranks = commit_ranks(table)
    return {path: ranks.get(snap, -1) for path, snap in live_entries(table)}


def referenced_files(table) -> set[str]:
    """The local paths of the data files any snapshot references (pyiceberg's ``all_data_files``)."""
    if not table.metadata.snapshots:
        return set()
    return {local_path(p) for p in table.inspect.all_data_files().column("file_path").to_pylist()}


def local_path(path: str) -> str:
    """A data file's path as the local file system names it (``file:/x``, ``file:///x`` → ``/x``)."""
    return urlparse(path).path if path.startswith("file:") else path


def data_files(warehouse: str | os.PathLike) -> set[str]:
    """Every parquet file under the table's ``data`` directory, as absolute paths."""
    found = set()
    for d, _, names in os.walk(table_dir(warehouse) / "data"):
        found |= {os.path.join(d, n) for n in names if n.endswith(".parquet")}
    return found


def read_output(location: OutputLocation) -> OutputView:
    """The Iceberg table in the warehouse ``location.directory`` at its current snapshot into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` = ``uncommitted`` = its rows, in commit order
    (``order``: ``commit``, ranked by the commit order of the snapshot that added each row's file, while
    every snapshot is an append; ``scan``, not judged for order, once one rewrote rows; or the declared
    ``location.order_column``, whose values rank the rows; an ``id`` column is not read: Iceberg has none
    that numbers rows as committed); no rows for a table with no snapshot yet; ``summary``: the
    ``metadata`` file and ``snapshot_id`` read (``None`` before the first snapshot), ``snapshots`` (their
    number) and the latest :data:`SHOWN` snapshots' summaries (``snapshot_summaries``), ``rows``, the
    current snapshot's live data ``files``, and ``orphan_files`` (data files in the table's directory that
    no snapshot references).

    Raises: :class:`~onceproof.sinks.base.OutputError` when there is no table, it lacks ``key``/``seq``
    or the declared order column, or pyiceberg cannot read it (any of its errors: a damaged or moved table;
    its metadata holds absolute paths), naming which."""
    from pyiceberg.table import StaticTable

    warehouse = Path(location.directory or "")
    meta = current_metadata(warehouse)
    if meta is None:
        raise OutputError(f"no Iceberg table at {table_dir(warehouse)}: the job committed no metadata there "
                          f"(does it write {{output_table}} with the catalog of {{iceberg_conf}}?)")
    try:
        table = StaticTable.from_metadata(str(meta))
        have = {f.name for f in table.schema().fields}
        declared = location.order_column
        table_rows.check_columns(have, declared, f"Iceberg table {table_dir(warehouse)}", "iceberg")
        snapshots = snapshot_summaries(table)
        appends_only = all(s.get("operation") in APPENDS for s in snapshots)
        # no "id": Iceberg has no column that numbers rows as they are committed, so a table's id is no order
        cols = [c for c in table_rows.COLUMNS if c in have and c not in (declared, "id")]
        added = live_files(table)
        rows, order, rank = _rows(table, cols + ([declared] if declared else []), appends_only, added)
        if declared:  # the declared order: its values rank the rows (ties unordered), not the snapshots
            rank = table_rows.as_rank(rows[declared])
            rows, order = rows.drop_columns([declared]), declared
        current = table.current_snapshot()
        referenced = referenced_files(table)
        frame = table_rows.frame(rows, rank)
    except OutputError:
        raise
    except Exception as e:  # pyiceberg's errors share no base class (ValueError, OSError, ResolveError, ...)
        raise OutputError(f"the Iceberg table at {table_dir(warehouse)} cannot be read "
                          f"({type(e).__name__}: {e})") from e
    orphans = sorted(f for f in data_files(warehouse) if f not in referenced)
    summary = {"table": str(table_dir(warehouse)), "metadata": meta.name,
               "snapshot_id": current.snapshot_id if current else None, "snapshots": len(snapshots),
               "order": order, "rows": rows.num_rows, "files": len(added), "orphan_files": len(orphans),
               "snapshot_summaries": snapshots[-SHOWN:]}
    return OutputView(committed=frame, uncommitted=frame[["partition", "offset"]].copy(),
                      stats={"iceberg_rows": rows.num_rows, "iceberg_snapshots": len(snapshots)},
                      summary=summary, result_key="iceberg")


class MetadataEnds:
    """An Iceberg table's commits as a :class:`~onceproof.sinks.base.CommittedEnd`: ``{0: highest metadata
    version}`` (0 before the table exists), from ``location.directory``. It grows when a commit renames the
    next ``v<N>.metadata.json`` into place, which is atomic; one directory listing, polled every 10 ms."""

    poll_s = 0.01

    def __init__(self, location: OutputLocation):
        self.warehouse = location.directory

    def read(self) -> dict[int, int]:
        v = metadata_versions(self.warehouse)
        return {0: v[-1] if v else 0}

    def close(self) -> None:
        """Nothing to release."""
