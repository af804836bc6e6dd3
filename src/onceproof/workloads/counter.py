"""The counter workload: a stateful aggregation through Spark state, checked as Kafka Streams'
``EosTestDriver`` checks its running aggregates (``workloads/base.py`` says what a workload is).

* **Client**: the keyed workload's (``workloads/keyed.py``): per key the sequence 0, 1, 2, ... into the
  input topic, each send recorded as ops in the history.
* **Transform**: group by key with a running ``count``, ``sum(seq)`` and ``max(seq)`` in Spark state,
  emitted in **update** mode (one row per key updated in a micro-batch) as ``{"key", "count", "sum",
  "max_seq"}``. The state store is RocksDB with changelog checkpointing
  (``RocksDBStateStoreProvider``; ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled``,
  Spark's Structured Streaming guide, "RocksDB State Store Implementation"). A replay of micro-batch N
  loads state version N-1 and recomputes the same rows per shuffle partition (hash of the key, with
  ``spark.sql.shuffle.partitions`` = the input's partition count, ``onceproof.job.build_spark``), which
  is what the eos sink's per-partition marker needs.
* **Decoder** and **checker**: ``checkers/counter.py`` (``state-double-count``, ``state-missed``,
  ``state-regression``, ``duplicate``, ``unexpected``, ``state-final-mismatch``).
"""

from __future__ import annotations

from onceproof.workloads import producers
from onceproof.workloads.keyed import KeyedWorkload

STATE_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


class Counter:
    """The counter workload (module docstring)."""

    name = "counter"
    summary = "running count and sum per key in Spark state (RocksDB, update mode)"
    output_mode = "update"
    spark_conf = STATE_CONF
    input_refs = False  # an aggregate comes from many input records

    def client(self, bootstrap: str, topic: str, history, *, rate: float, keys: int, seed: int,
               producer: str = producers.DEFAULT, input_aborts: float | None = None) -> KeyedWorkload:
        return producers.client(producer, bootstrap, topic, history, rate=rate, keys=keys, seed=seed,
                                input_aborts=input_aborts)

    def transform(self, src):
        """Kafka source rows → ``key: string, value: binary`` (``{"key", "count", "sum", "max_seq"}``)."""
        # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
        from pyspark.sql import functions as F

        v = F.from_json(F.col("value").cast("string"), "key STRING, seq LONG")
        parsed = src.select(F.col("key").cast("string").alias("key"), v["seq"].alias("seq"))
        agg = parsed.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("seq").alias("sum"),
                                        F.max("seq").alias("max_seq"))
        value = F.to_json(F.struct("key", "count", "sum", "max_seq"))
        return agg.select("key", value.cast("binary").alias("value"))

    def decode(self, frame):
        # lazy: pandas; the job's driver imports this workload and has none
        from onceproof.checkers.counter import decode

        return decode(frame)

    def check(self, history, input, output, recovery=None) -> dict:
        """``onceproof.checkers.counter.check``, plus the history's sends: ``stats`` ``sends_ok``/``sends_info``/
        ``sends_fail`` and the definite ``lost-write`` (an ``ok`` send whose (key, seq) is not in the input
        log), as the keyed checker reports them."""
        # lazy: pandas; the job's driver imports this workload and has none
        from onceproof.checkers.counter import check

        r = check(history, input, output, recovery)
        sends = history[history["f"] == "send"] if len(history) and "f" in history.columns else history.iloc[0:0]
        n = {t: int((sends["type"] == t).sum()) if len(sends) else 0 for t in ("ok", "info", "fail")}
        r.setdefault("stats", {}).update(sends_ok=n["ok"], sends_info=n["info"], sends_fail=n["fail"])
        lost = []
        if n["ok"]:
            ok = sends[sends["type"] == "ok"]
            have = set(zip(input["key"].astype(str), input["seq"].astype("Int64")))
            lost = [{"key": k, "seq": int(s)} for k, s in zip(ok["key"].astype(str), ok["seq"].astype("int64"))
                    if (k, s) not in have]
        r["counts"] = {**r["counts"], "lost-write": len(lost)}
        r["anomalies"] = {**r["anomalies"], "lost-write": lost[:10]}
        if lost:
            r["definite"] = list(dict.fromkeys([*r.get("definite", []), "lost-write"]))
            r.update(verdict="invalid", valid=False)
        return r


WORKLOAD = Counter()
