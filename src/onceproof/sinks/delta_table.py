"""The committed state of a sink that writes a Delta Lake table: its latest committed version, read
through its ``_delta_log`` with delta-rs (``deltalake``), without Spark.

A Delta table's commit is the atomic creation of ``_delta_log/<version>.json`` (PROTOCOL.md, "Delta Log
Entries"); a data file that no committed version adds (the parquet of a write that died before its commit
JSON) is in the directory but not in the table, so it is never counted, as Kafka's read_committed skips
aborted records. It is reported as an orphan. The report names the version read and the ``txn`` actions
(``appId``, ``version``: PROTOCOL.md, "Transaction Identifiers") of the commits up to it: Delta's streaming
sink writes ``SetTransaction(queryId, batchId)``, a ``foreachBatch`` writer ``txnAppId``/``txnVersion``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from onceproof.sinks import table_rows
from onceproof.sinks.base import OutputError, OutputLocation, OutputView

LOG = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
TXN_SHOWN = 20
"""The latest ``txn`` actions kept in the summary (all are counted)."""


def log_versions(path: str | os.PathLike) -> list[int]:
    """The versions with a commit file (``_delta_log/<20 digits>.json``), ascending; ``[]`` when there is
    no log. One directory listing: cheap enough to poll."""
    try:
        names = os.listdir(Path(path) / LOG)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))


def _actions(path: str | os.PathLike, upto: int):
    """``(version, action)`` for every action of the commit files up to version ``upto``, in commit order
    (torn lines and unreadable files skipped: delta-rs has validated the version read)."""
    for v in log_versions(path):
        if v > upto:
            break
        try:
            lines = (Path(path) / LOG / f"{v:020d}.json").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                action = json.loads(line)
            except ValueError:
                continue
            if isinstance(action, dict):
                yield v, action


def added_in(path: str | os.PathLike, upto: int) -> dict[str, int]:
    """``{data file path relative to the table: the version whose commit added it}`` for the commits up to
    ``upto`` (``add`` actions; their paths are URL-encoded, PROTOCOL.md "Add File and Remove File")."""
    out = {}
    for v, action in _actions(path, upto):
        add = action.get("add")
        if isinstance(add, dict) and isinstance(add.get("path"), str):
            out[unquote(add["path"])] = v
    return out


def txn_actions(path: str | os.PathLike, upto: int) -> list[dict]:
    """The ``txn`` actions of the commit files up to version ``upto``: ``[{"table_version", "appId",
    "version"}]`` in commit order. Commit files cleaned up by log retention are not read (their state is
    in the table's checkpoint; ``DeltaTable.transaction_version`` still answers for the latest)."""
    return [{"table_version": v, "appId": a["txn"].get("appId"), "version": a["txn"].get("version")}
            for v, a in _actions(path, upto) if isinstance(a.get("txn"), dict)]


def _in_commit_order(dt: DeltaTable, path: Path, version: int, columns: list[str]
                     ) -> tuple[pa.Table, str, np.ndarray | None]:
    """The table's rows by the commit that added them: its data files sorted by the version that added
    them (then by name), each file's rows in file order, ``"commit"``, and per row that version (an
    order rank: the rows of one commit have no order among themselves, the commit versions do; NA, as
    -1 here, for a file whose commit log retention removed). A table with partition columns (their
    values live in the paths, not the files) through delta-rs's own scan: ``"scan"`` and no rank."""
    if dt.metadata().partition_columns:
        return dt.to_pyarrow_table(columns=columns), "scan", None
    added = added_in(path, version)
    files = sorted((os.path.relpath(u.removeprefix("file://"), path) for u in dt.file_uris()),
                   key=lambda f: (added.get(f, -1), f))
    parts = [pq.read_table(path / f, columns=columns) for f in files]
    if not parts:
        table = dt.to_pyarrow_table(columns=columns)
        return table, "commit", np.full(table.num_rows, -1, np.int64)
    rank = np.repeat([added.get(f, -1) for f in files], [p.num_rows for p in parts]).astype(np.int64)
    return pa.concat_tables(parts, promote_options="permissive"), "commit", rank


def _data_files(path: Path) -> set[str]:
    """Every parquet file under ``path`` outside ``_delta_log``, relative to it."""
    found = set()
    for d, dirs, names in os.walk(path):
        dirs[:] = [x for x in dirs if x != LOG and not x.startswith((".", "_"))]
        found |= {os.path.relpath(os.path.join(d, n), path) for n in names if n.endswith(".parquet")}
    return found


def read_output(location: OutputLocation) -> OutputView:
    """The Delta table in ``location.directory`` at its latest committed version into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` = ``uncommitted`` = its rows, in commit order
    (``order``: ``commit``, ranked by the version that added each row; ``scan`` for a partitioned table,
    not judged for order; or the declared ``location.order_column``, whose values rank the rows) (a data
    file no commit adds is not the table's: see ``orphan_files``); ``summary``: the ``version`` read, its
    committed ``files``, the ``orphan_files`` in the directory, the ``txn`` actions seen (the latest
    :data:`TXN_SHOWN`, ``txn_count``) and the latest version per app id (``txn_latest``).

    Raises: :class:`~onceproof.sinks.base.OutputError` when there is no table, it lacks ``key``/``seq``
    or the declared order column, or delta-rs cannot read it (a damaged commit file), naming which."""
    path = Path(location.directory or "")
    try:
        dt = DeltaTable(str(path))
        version = dt.version()
        have = {f.name for f in dt.schema().fields}
        declared = location.order_column
        table_rows.check_columns(have, declared, f"Delta table {path}", "delta")
        cols = [c for c in table_rows.COLUMNS if c in have and c != declared]
        table, order, rank = _in_commit_order(dt, path, version, cols + ([declared] if declared else []))
        if declared:  # the declared order: its values rank the rows (ties unordered), not the commits
            rank = table_rows.as_rank(table[declared])
            table, order = table.drop_columns([c for c in (declared, "id") if c in table.column_names]), declared
        committed = {os.path.relpath(u.removeprefix("file://"), path) for u in dt.file_uris()}
    except TableNotFoundError as e:
        raise OutputError(f"no Delta table at {path}: the job committed nothing to its {LOG} "
                          f"(does it write {{output_path}}?)") from e
    except (DeltaError, OSError, pa.ArrowException) as e:
        raise OutputError(f"the Delta table at {path} cannot be read ({type(e).__name__}: {e})") from e
    txns = txn_actions(path, version)
    latest: dict[str, int] = {}
    for t in txns:
        latest[str(t["appId"])] = t["version"]
    orphans = sorted(_data_files(path) - committed)
    summary = {"table": str(path), "version": version, "order": order, "rows": table.num_rows,
               "files": len(committed),
               "orphan_files": len(orphans), "txn_count": len(txns), "txn": txns[-TXN_SHOWN:],
               "txn_latest": latest}
    frame = table_rows.frame(table, rank)
    return OutputView(committed=frame, uncommitted=frame[["partition", "offset"]].copy(),
                      stats={"delta_rows": table.num_rows, "delta_version": version},
                      summary=summary, result_key="delta")


class DeltaLogEnds:
    """A Delta table's committed versions as a :class:`~onceproof.sinks.base.CommittedEnd`: ``{0: highest
    version + 1}`` (0 without a log), from ``location.directory``. It grows when a commit file appears,
    which is atomic; one directory listing, polled every 10 ms."""

    poll_s = 0.01

    def __init__(self, location: OutputLocation):
        self.path = location.directory

    def read(self) -> dict[int, int]:
        v = log_versions(self.path)
        return {0: v[-1] + 1 if v else 0}

    def close(self) -> None:
        """Nothing to release."""
