"""The driver's warm-up (``onceproof.job.warm_up``) runs exactly one micro-batch of a throwaway streaming
query whose rows reach the executors' Python workers, then leaves no query running and no checkpoint
behind, on real Spark (local[2], marker ``spark_local``). A run's driver does the same before
``driver.ready``, which the workload waits for; the cluster tests cover that path end to end."""

from __future__ import annotations

import sys
import tempfile

import pytest

from onceproof import job

pytestmark = pytest.mark.spark_local


def test_the_warm_up_is_one_micro_batch_through_the_python_workers_and_leaves_nothing(spark, monkeypatch,
                                                                                      tmp_path):
    # the executors' Python workers: this interpreter (it has the sink's imports), not PATH's python3
    monkeypatch.setattr(spark.sparkContext, "pythonExec", sys.executable)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the throwaway checkpoint goes
    batches = []
    real = job._warm_batch
    monkeypatch.setattr(job, "_warm_batch", lambda df, batch_id: batches.append((batch_id, real(df, batch_id))))
    seconds = job.warm_up(spark, 2)
    assert batches == [(0, [1, 1])]  # one micro-batch, batchId 0, one row in each of the 2 tasks
    assert seconds > 0
    assert spark.streams.active == []
    assert list(tmp_path.iterdir()) == []  # the checkpoint directory is gone
