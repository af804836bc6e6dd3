"""The cluster half of ``tests/unit/test_counter_checker.py``: tests that need a local cluster or Spark."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.unit.test_counter_checker import EMPTY  # noqa: F401 (fixtures are used by name)


@pytest.mark.cluster
def test_the_counter_transform_on_real_spark_gives_what_the_decoder_and_checker_read():
    """The pipeline side (workloads/counter.py: parse, groupBy, count/sum/max, to_json) on a real local
    Spark over rows shaped like Spark's Kafka source, decoded and checked as a run's output is."""
    import json as _json

    from pyspark.sql import SparkSession

    from onceproof.workloads import registry

    wl = registry.get("counter")
    recs = [("k1", s) for s in range(4)] + [("k2", s) for s in range(3)]
    rows = [(k.encode(), _json.dumps({"key": k, "seq": s, "t": 0}).encode(), 0, i, None)
            for i, (k, s) in enumerate(recs)]
    spark = (SparkSession.builder.master("local[1]").appName("counter-transform")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        src = spark.createDataFrame(rows, "key binary, value binary, partition int, offset long, timestamp timestamp")
        out = wl.transform(src).toPandas()
    finally:
        spark.stop()
    assert list(out.columns) == ["key", "value"]
    dec = wl.decode(out.assign(partition=0, offset=range(len(out))))
    got = {r.key: (r.count, r.sum, r.max_seq) for r in dec.itertuples()}
    assert got == {"k1": (4, 6, 3), "k2": (3, 3, 2)}
    inp = pd.DataFrame({"key": [k for k, _ in recs], "seq": [s for _, s in recs], "partition": 0,
                        "offset": range(len(recs))})
    assert wl.check(EMPTY, inp, dec)["verdict"] == "valid"


