"""The warm cluster's decisions on synthetic data: which runs may lease it (``warm.refusal``) and what its
health gate reads from ``list_topics`` metadata (``warm.replicas_out``, ``warm.out_of_isr``). The gate on
real brokers is in ``cluster/test_input_aborts.py``."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from onceproof.backends.base import ClusterError, ClusterShape
from onceproof.harness import warm
from tests.stand_in_backend import StandInBackend

WARM = ClusterShape(Path("/w"), nodes=3, kafka_version="4.1.1")


def shape(**kw) -> ClusterShape:
    return replace(ClusterShape(Path("/run/cluster"), nodes=3), **kw)


def test_a_plain_run_fits():
    assert warm.refusal(shape(), WARM, ["kill-broker:leader", "kill-driver", "pause-broker"]) is None
    assert warm.refusal(shape(kafka_version="4.1.1"), WARM, []) is None


@pytest.mark.parametrize("attr, words", [("proxied", "toxiproxy"), ("clocks", "libfaketime"),
                                         ("small_disks", "size-limited"), ("lazyfs", "lazyfs"),
                                         ("own_groups", "cgroups")])
def test_another_shape_needs_a_fresh_cluster(attr, words):
    why = warm.refusal(shape(**{attr: True}), WARM, [])
    assert why and words in why


def test_another_release_or_size_needs_a_fresh_cluster():
    assert "Kafka 3.5.2" in warm.refusal(shape(kafka_version="3.5.2"), WARM, [])
    assert "5 brokers" in warm.refusal(shape(nodes=5), WARM, [])


@pytest.mark.parametrize("spec", ["rolling-upgrade", "corrupt-segment-tail:leader"])
def test_a_fault_that_leaves_state_needs_a_fresh_cluster(spec):
    assert "leaves state behind" in warm.refusal(shape(), WARM, ["kill-driver", spec])


def _meta(brokers, parts):
    """``list_topics`` metadata: ``parts`` = {topic: {partition: (leader, replicas, isrs)}}."""
    topics = {t: SimpleNamespace(error=None, partitions={p: SimpleNamespace(leader=le, replicas=r, isrs=i)
                                                         for p, (le, r, i) in ps.items()})
              for t, ps in parts.items()}
    return SimpleNamespace(brokers={b: None for b in brokers}, topics=topics)


def test_a_healthy_cluster_has_nothing_out():
    m = _meta([1, 2, 3], {"__consumer_offsets": {0: (1, [1, 2, 3], [3, 1, 2])}, "x": {0: (2, [2], [2])}})
    assert warm.replicas_out(m, [1, 2, 3]) == []


def test_a_missing_broker_and_a_short_isr_are_named():
    m = _meta([1, 3], {"t": {0: (1, [1, 2, 3], [1, 3]), 1: (-1, [2], [])}})
    out = warm.replicas_out(m, [1, 2, 3])
    assert out[0] == "brokers registered [1, 3], expected [1, 2, 3]"
    assert "t-0: replicas [1, 2, 3] ISR [1, 3]" in out
    assert "t-1: replicas [2] ISR [] no leader" in out
    assert warm.out_of_isr(m) == [2]


def test_only_a_backend_with_warm_clusters_attaches(tmp_path):
    with pytest.raises(ClusterError, match="keeps no warm cluster"):
        warm.WarmCluster(StandInBackend(), tmp_path)


def test_a_warm_topic_prefix_is_per_run():
    w = object.__new__(warm.WarmCluster)
    a, b = w.names(), w.names()
    assert a.input.startswith(warm.PREFIX) and a.input.endswith("-input") and a.input != b.input


def test_a_warm_cluster_behind_toxiproxy_takes_runs_with_and_without_network_faults():
    proxied = replace(WARM, proxied=True, own_groups=True)
    assert warm.refusal(shape(), proxied, ["kill-driver"]) is None
    assert warm.refusal(shape(proxied=True, own_groups=True), proxied, ["partition:isolate"]) is None
    assert "cgroups" in warm.refusal(shape(own_groups=True), replace(WARM, proxied=True), ["partition"])


def test_a_job_that_does_not_take_its_topic_names_needs_a_fresh_cluster():
    assert warm.job_refusal("", writes_topic=True) is None
    ok = "{python} job.py --bootstrap {bootstrap} --input-topic {input_topic} --output-topic {output_topic}"
    assert warm.job_refusal(ok, writes_topic=True) is None
    assert "{output_topic}" in warm.job_refusal(ok.replace("{output_topic}", "output"), writes_topic=True)
    assert warm.job_refusal(ok.replace(" --output-topic {output_topic}", ""), writes_topic=False) is None
    assert "{input_topic}" in warm.job_refusal("{python} job.py --bootstrap {bootstrap}", writes_topic=False)
