"""The checks as Spark jobs, for histories past one machine: the engine (``engine``, ``transactions``:
the exactly-once and transaction checks on Spark DataFrames) and how a run is read and checked on a
Spark session (``checks``). Imports pyspark; nothing outside ``onceproof.checking.engines`` imports
this package eagerly."""
