"""Check time of a PostgreSQL output table: a real server (``backends/common/postgres.py``), a table of
``--rows`` records written as the bundled ``postgres`` sink writes them (``COPY``), then the output
reader's ``REPEATABLE READ`` read (``onceproof.sinks.postgres_table.read_output``) and the exactly-once
checker on it, against the input frame that produced it. Some records are written twice (``--dups``), and
the bench fails (exit 1) unless the checker reports exactly those as ``duplicate``.

Writes ``bench/postgres_read.json``: rows, seconds to load, to read, to check, and the read's peak RSS
growth (MiB).

    .venv/bin/python bench/postgres_read_bench.py                  # 1M rows, about 1 min
    .venv/bin/python bench/postgres_read_bench.py --rows 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import psycopg
from psycopg import sql

from onceproof.backends.common.postgres import PostgresServer
from onceproof.checkers import exactly_once
from onceproof.pipeline import postgres_sink
from onceproof.sinks.base import OutputLocation
from onceproof.sinks.postgres_table import read_output

TABLE = "output"


def _load(dsn: str, rows: int, keys: int, dups: int) -> None:
    postgres_sink.create_tables(dsn, TABLE)
    seq = np.arange(rows) // keys
    key = np.arange(rows) % keys
    with psycopg.connect(dsn) as conn, conn.transaction():
        copy = sql.SQL("COPY {} (key, seq, in_partition, in_offset, in_ts, batch_id, incarnation) FROM STDIN").format(
            sql.Identifier(TABLE))
        with conn.cursor().copy(copy) as cp:
            for i in range(rows):
                cp.write_row((f"k{key[i]}", int(seq[i]), i % 6, i // 6, 0, i // 10_000, "1"))
            for i in range(dups):  # the same records again, as a replayed batch would write them
                cp.write_row((f"k{key[i]}", int(seq[i]), i % 6, i // 6, 0, 0, "2"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--dups", type=int, default=1_000)
    ap.add_argument("--json", default=str(Path(__file__).with_name("postgres_read.json")))
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="onceproof-bench-") as d:
        server = PostgresServer(Path(d) / "postgres", Path(d) / "postgres.log")
        try:
            server.start()
            t = time.monotonic()
            _load(server.dsn, a.rows, a.keys, a.dups)
            load_s = time.monotonic() - t
            rss0 = psutil.Process().memory_info().rss
            t = time.monotonic()
            view = read_output(OutputLocation(topic=TABLE, dsn=server.dsn))
            read_s = time.monotonic() - t
            rss1 = psutil.Process().memory_info().rss
        finally:
            server.stop()
    n = np.arange(a.rows)
    inp = pd.DataFrame({"partition": (n % 6).astype(np.int32), "offset": (n // 6).astype(np.int64),
                        "key": pd.array([f"k{k}" for k in n % a.keys], dtype="string"),
                        "seq": pd.array(n // a.keys, dtype="Int64")})
    t = time.monotonic()
    result = exactly_once.check(pd.DataFrame(), inp, view.committed)  # no workload history: the output only
    check_s = time.monotonic() - t
    dup = result["counts"].get("duplicate")
    out = {"rows": a.rows, "dups": a.dups, "load_s": round(load_s, 2), "read_s": round(read_s, 2),
           "check_s": round(check_s, 2), "read_rss_mib": round((rss1 - rss0) / 2**20, 1),
           "duplicate": dup, "verdict": result.get("verdict")}
    Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    if dup != a.dups:
        print(f"FAIL: {a.dups} records written twice, the checker found {dup}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
