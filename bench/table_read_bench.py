"""Check time of a table output (PostgreSQL or Delta Lake) of ``--rows`` records: the table written as the
bundled sink writes it, then the output reader (``read_output`` of ``sinks/postgres_table.py``: one
``REPEATABLE READ`` transaction; of ``sinks/delta_table.py``: the latest committed version through its
``_delta_log``, with delta-rs) and the exactly-once checker on it, against the input frame that produced
it. Some records are written twice (``--dups``, as a replayed micro-batch), and the bench fails (exit 1)
unless the checker reports exactly those as ``duplicate``.

* ``--table postgres``: a real server (``backends/common/postgres.py``), one ``COPY``.
* ``--table delta``: a table written by delta-rs in commits of ``--batch`` rows (a micro-batch each, so
  the reader walks one ``_delta_log`` commit per batch), the duplicates in one more commit.
* ``--table iceberg``: an Iceberg table written by pyiceberg in snapshots of ``--batch`` rows, the
  duplicates in one more, read at its current snapshot (``sinks/iceberg_table.py``).

Writes ``bench/<table>_read.json``: rows, seconds to load, to read, to check, and the read's peak RSS
growth (MiB).

    .venv/bin/python bench/table_read_bench.py --table postgres      # 1M rows, about 30 s
    .venv/bin/python bench/table_read_bench.py --table delta         # 1M rows in 100 commits
    .venv/bin/python bench/table_read_bench.py --table delta --rows 100000
    .venv/bin/python bench/table_read_bench.py --table iceberg       # 1M rows in 101 snapshots

Why our own script rather than a benchmark framework: the setup (a server, a table of a million rows) is
the bench's own, and each measurement is one call timed once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import psutil
import pyarrow as pa

from onceproof.checkers import exactly_once
from onceproof.sinks.base import OutputLocation, OutputView


class Table(Protocol):
    """One kind of output table: written with ``rows`` records (``dups`` of them twice), then read."""

    def load(self, work: Path, rows: pa.Table, dups: pa.Table) -> contextlib.AbstractContextManager[OutputLocation]:
        """Write ``rows`` then ``dups``; yields where the table is, and cleans up after."""

    def read(self, location: OutputLocation) -> OutputView:
        """The output reader under test."""


class Postgres:
    """A real server in ``work``; the bundled sink's tables and one ``COPY`` (``pipeline/postgres_sink.py``)."""

    NAME = "output"

    @contextlib.contextmanager
    def load(self, work: Path, rows: pa.Table, dups: pa.Table) -> Iterator[OutputLocation]:
        import psycopg
        from psycopg import sql

        from onceproof.backends.common.postgres import PostgresServer
        from onceproof.pipeline import postgres_sink

        server = PostgresServer(work / "postgres", work / "postgres.log")
        try:
            server.start()
            postgres_sink.create_tables(server.dsn, self.NAME)
            cols = rows.column_names
            copy = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(self.NAME),
                                                             sql.SQL(", ").join(map(sql.Identifier, cols)))
            with psycopg.connect(server.dsn) as conn, conn.transaction(), conn.cursor().copy(copy) as cp:
                for t in (rows, dups):
                    for r in zip(*(t[c].to_pylist() for c in cols)):
                        cp.write_row(r)
            yield OutputLocation(topic=self.NAME, dsn=server.dsn)
        finally:
            server.stop()

    def read(self, location: OutputLocation) -> OutputView:
        from onceproof.sinks.postgres_table import read_output

        return read_output(location)


class Delta:
    """A table written by delta-rs, one commit per ``batch`` rows and one for the duplicates."""

    def __init__(self, batch: int):
        self.batch = batch

    @contextlib.contextmanager
    def load(self, work: Path, rows: pa.Table, dups: pa.Table) -> Iterator[OutputLocation]:
        from deltalake import write_deltalake

        path = work / "delta-table"
        for start in range(0, rows.num_rows, self.batch):
            write_deltalake(str(path), rows.slice(start, self.batch), mode="append")
        write_deltalake(str(path), dups, mode="append")
        yield OutputLocation(directory=path)

    def read(self, location: OutputLocation) -> OutputView:
        from onceproof.sinks.delta_table import read_output

        return read_output(location)


class Iceberg:
    """A table written by pyiceberg, one snapshot per ``batch`` rows and one for the duplicates, in the
    layout of the Hadoop catalog the Iceberg sinks use (``<warehouse>/db/output``, each commit's metadata
    published as the next ``metadata/v<N>.metadata.json``); pyiceberg's SQL catalog (SQLite) does the
    writing, as it has no Hadoop catalog."""

    def __init__(self, batch: int):
        self.batch = batch

    @contextlib.contextmanager
    def load(self, work: Path, rows: pa.Table, dups: pa.Table) -> Iterator[OutputLocation]:
        import shutil

        from pyiceberg.catalog.sql import SqlCatalog

        from onceproof.sinks.iceberg_table import METADATA, table_dir

        warehouse = work / "iceberg-warehouse"
        catalog = SqlCatalog("bench", uri=f"sqlite:///{work / 'catalog.db'}", warehouse=f"file://{warehouse}")
        catalog.create_namespace("db")
        table = catalog.create_table("db.output", schema=rows.schema, location=str(table_dir(warehouse)))
        batches = [rows.slice(s, self.batch) for s in range(0, rows.num_rows, self.batch)] + [dups]
        for version, batch in enumerate([None, *batches], start=1):
            if batch is not None:
                table.append(batch)
            shutil.copy(table.metadata_location.removeprefix("file://"),
                        table_dir(warehouse) / METADATA / f"v{version}.metadata.json")
        yield OutputLocation(directory=warehouse)

    def read(self, location: OutputLocation) -> OutputView:
        from onceproof.sinks.iceberg_table import read_output

        return read_output(location)


TABLES = {"postgres": lambda a: Postgres(), "delta": lambda a: Delta(a.batch), "iceberg": lambda a: Iceberg(a.batch)}


def records(rows: int, keys: int, dups: int) -> tuple[pa.Table, pa.Table]:
    """The bundled sinks' columns for ``rows`` records (``keys`` keys, seq counting per key) and the first
    ``dups`` of them again, as a replay by a second driver incarnation writes them."""
    n = np.arange(rows)
    t = pa.table({"key": pa.array([f"k{k}" for k in n % keys]), "seq": pa.array(n // keys),
                  "in_partition": pa.array(n % 6), "in_offset": pa.array(n // 6),
                  "in_ts": pa.array(np.zeros(rows, dtype=np.int64)),
                  "batch_id": pa.array([str(b) for b in n // 10_000]),
                  "incarnation": pa.array(["1"] * rows)})
    again = t.slice(0, dups).set_column(6, "incarnation", pa.array(["2"] * dups))
    return t, again


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=sorted(TABLES), required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--dups", type=int, default=1_000)
    ap.add_argument("--batch", type=int, default=10_000, help="rows per Delta commit or Iceberg snapshot (a "
                                                              "micro-batch)")
    ap.add_argument("--json", help="default: bench/<table>_read.json")
    a = ap.parse_args(argv)
    table: Table = TABLES[a.table](a)
    rows, dups = records(a.rows, a.keys, a.dups)
    with tempfile.TemporaryDirectory(prefix="onceproof-bench-") as d:
        t = time.monotonic()
        with table.load(Path(d), rows, dups) as location:
            load_s = time.monotonic() - t
            rss0 = psutil.Process().memory_info().rss
            t = time.monotonic()
            view = table.read(location)
            read_s = time.monotonic() - t
            rss1 = psutil.Process().memory_info().rss
    n = np.arange(a.rows)
    inp = pd.DataFrame({"partition": (n % 6).astype(np.int32), "offset": (n // 6).astype(np.int64),
                        "key": pd.array([f"k{k}" for k in n % a.keys], dtype="string"),
                        "seq": pd.array(n // a.keys, dtype="Int64")})
    t = time.monotonic()
    result = exactly_once.check(pd.DataFrame(), inp, view.committed)  # no workload history: the output only
    check_s = time.monotonic() - t
    dup = result["counts"].get("duplicate")
    out = {"table": a.table, "rows": a.rows, "dups": a.dups, "load_s": round(load_s, 2), "read_s": round(read_s, 2),
           "check_s": round(check_s, 2), "read_rss_mib": round((rss1 - rss0) / 2**20, 1),
           "duplicate": dup, "verdict": result.get("verdict"), "summary": view.summary}
    dest = Path(a.json or Path(__file__).with_name(f"{a.table}_read.json"))
    dest.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "summary"}))
    if dup != a.dups:
        print(f"FAIL: {a.dups} records written twice, the checker found {dup}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
