"""``add-input-partitions``' pure parts: which new partitions an offset-log entry reads from, and its
place among the operator faults (synthetic offsets, no cluster)."""

from onceproof.nemesis import catalog, packages
from onceproof.nemesis.grow import planned_new


def test_a_new_partition_counts_once_the_pipeline_plans_records_from_it():
    offsets = {"input": {0: 120, 5: 90, 6: 0, 7: 14}, "other": {6: 50}}
    assert planned_new(offsets, "input", [6, 7]) == {7: 14}  # 6 is known but still empty
    assert planned_new(offsets, "input", [8, 9]) == {}
    assert planned_new({}, "input", [6, 7]) == {}


def test_it_is_an_operator_fault_outside_all():
    assert catalog.parse("add-input-partitions") == ["add-input-partitions"]
    assert "add-input-partitions" in catalog.OPERATOR and "add-input-partitions" not in catalog.all_specs()
    assert "add-input-partitions" in packages.specs("operator")
