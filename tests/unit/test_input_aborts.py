"""The workload's aborts on purpose (``workloads/transactional_client.py``) and the ``--input-aborts``
option, on synthetic draws: no Kafka (the cluster half is ``tests/cluster/test_workload_producers.py``)."""

from __future__ import annotations

import pytest

from onceproof.harness.config import ConfigError, TestConfig
from onceproof.workloads import producers
from onceproof.workloads.transactional_client import HELD_TXN, TransactionalWorkload


def _draws(seed: int, fraction: float, n: int = 2000) -> list[bool]:
    wl = TransactionalWorkload("127.0.0.1:1", "in", None, seed=seed, input_aborts=fraction)
    out = []
    for i in range(1, n + 1):
        wl.txns = i
        out.append(wl._abort_on_purpose())
    return out


def test_aborts_are_a_seeded_fraction_and_spare_the_held_transaction():
    a = _draws(7, 0.1)
    assert a == _draws(7, 0.1), "the same seed aborts the same transactions"
    assert a != _draws(8, 0.1)
    assert 0.07 < sum(a) / len(a) < 0.13, sum(a)
    assert not a[HELD_TXN - 1] and not any(_draws(7, 0.0)) and all(
        x for i, x in enumerate(_draws(7, 1.0)) if i != HELD_TXN - 1)


def test_only_a_transactional_producer_aborts():
    assert producers.DEFAULT == "transactional"
    assert producers.aborts("transactional", 0.1) == 0.1
    assert producers.aborts("at-most-once", 0.1) == 0.0 and producers.aborts("idempotent", 0.3) == 0.0
    wl = producers.client("transactional", "127.0.0.1:1", "in", None, rate=1, keys=1, seed=1, input_aborts=0.25)
    assert wl.input_aborts == 0.25
    assert producers.client("transactional", "127.0.0.1:1", "in", None, rate=1, keys=1, seed=1).input_aborts == 0.1
    plain = producers.client("at-most-once", "127.0.0.1:1", "in", None, rate=1, keys=1, seed=1, input_aborts=0.25)
    assert not hasattr(plain, "input_aborts")


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_input_aborts_outside_0_to_1_is_a_usage_error(bad):
    with pytest.raises(ConfigError, match="--input-aborts"):
        TestConfig(input_aborts=bad).validate()


def test_the_read_uncommitted_mutant_changes_only_its_sources_isolation_level():
    from onceproof.pipeline import mutants

    assert mutants.source_isolation("eos-read-uncommitted") == "read_uncommitted"
    assert all(mutants.source_isolation(s) == "read_committed" for s in ("eos", "eos-no-marker", "at-least-once"))
    m = mutants.MUTANTS["eos-read-uncommitted"]
    assert (m.package, m.anomaly, m.caught) == ("commit", "aborted-input-read", True)
