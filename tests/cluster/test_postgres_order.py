"""A real PostgreSQL table upserted the way ``tests/jobs/postgres_upsert_job.py`` does it, read by the
output reader (``sinks/postgres_table.py``): ``DO UPDATE`` writes a new row version at a new physical
place, so the table's physical order shows a key going back; with no order column that order is no
order a user reads, and the check does not judge it (the false alarm this replaced). A few seconds: one
server, no Kafka, no Spark."""

from __future__ import annotations

import pandas as pd
import psycopg
import pytest

from onceproof.backends.common.postgres import PostgresServer
from onceproof.checkers import exactly_once
from onceproof.sinks.base import ORDER_RANK, OutputLocation
from onceproof.sinks.postgres_table import read_output

pytestmark = pytest.mark.cluster


def test_an_upserted_table_without_an_order_column_is_not_judged_for_order(tmp_path):
    server = PostgresServer(tmp_path / "pg", tmp_path / "postgres.log")
    try:
        server.start()
        with psycopg.connect(server.dsn, autocommit=True) as c:
            for table, id_col in (("upserted", ""), ("with_id", "id bigserial, ")):
                c.execute(f"CREATE TABLE {table} ({id_col}key text, seq bigint, PRIMARY KEY (key, seq))")
                upsert = (f"INSERT INTO {table} (key, seq) VALUES (%s, %s) "
                          "ON CONFLICT (key, seq) DO UPDATE SET seq = EXCLUDED.seq")
                c.cursor().executemany(upsert, [("k0", s) for s in range(10)])
                c.cursor().executemany(upsert, [("k0", s) for s in range(5)])  # a replayed batch
        inp = pd.DataFrame({"key": "k0", "seq": range(10), "partition": 0, "offset": range(10)})
        hist = inp.assign(type="ok", f="send")
        view = read_output(OutputLocation(topic="upserted", dsn=server.dsn))
        out = view.committed
        assert list(out["seq"]) == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4], "physical order moved the replayed rows"
        assert view.summary["order"] is None and out[ORDER_RANK].isna().all()
        r = exactly_once.check(hist, inp, out)
        assert r["verdict"] == "valid" and r["order"] == exactly_once.NOT_JUDGED, (r["counts"], r["order"])
        physical = exactly_once.check(hist, inp, out.drop(columns=[ORDER_RANK]))  # the old reading
        assert physical["counts"]["nonmonotonic"] == 1, physical["counts"]
        # a declared order column (--order-column): the rows are judged by it; a replay that moved seq 3's
        # "written" past seq 9 is a step back in the order the user declared
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute("CREATE TABLE declared (key text, seq bigint, written bigint, PRIMARY KEY (key, seq))")
            c.cursor().executemany("INSERT INTO declared VALUES (%s, %s, %s) ON CONFLICT (key, seq) DO UPDATE "
                                   "SET written = EXCLUDED.written",
                                   [("k0", s, s) for s in range(10)] + [("k0", 3, 20)])
        declared = read_output(OutputLocation(topic="declared", dsn=server.dsn, order_column="written"))
        assert declared.summary["order"] == "written" and list(declared.committed["seq"])[-1] == 3
        r = exactly_once.check(hist, inp, declared.committed)
        assert r["counts"]["nonmonotonic"] == 1 and r["order"] == exactly_once.ORDER_BY_RANK, r["counts"]
        with pytest.raises(Exception, match="no column nope .--order-column."):
            read_output(OutputLocation(topic="declared", dsn=server.dsn, order_column="nope"))
        with_id = read_output(OutputLocation(topic="with_id", dsn=server.dsn))
        assert with_id.summary["order"] == "id" and ORDER_RANK not in with_id.committed.columns
        r = exactly_once.check(hist, inp, with_id.committed)
        assert r["verdict"] == "valid" and r["order"] == exactly_once.ORDER_BY_POSITION, r["counts"]
    finally:
        server.stop()
