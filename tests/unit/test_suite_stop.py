"""``test-all --stop-when-caught``: the later seeds of a caught mutant's (sink, workload, package) are
not run, and the certificate says which (synthetic cells, no run)."""

from onceproof.harness.suite import Cell, rest_of_group
from onceproof.report.certificate import NOT_NEEDED_NOTE, not_needed_text, write_certificate


def _cells():
    return [Cell("eos", "keyed", "commit", s, "valid", 60.0) for s in (1, 2, 3)] + \
           [Cell("eos-no-marker", "keyed", "commit", s, "invalid", 60.0) for s in (1, 2, 3)] + \
           [Cell("eos-no-marker", "keyed", "process", s, "invalid", 60.0) for s in (1, 2)]


def test_a_catch_drops_only_the_later_seeds_of_its_own_group():
    cells = _cells()
    kept, dropped = rest_of_group(cells, 3)  # eos-no-marker × commit, seed 1, caught
    assert [(c.sink, c.package, c.seed) for c in kept] == [
        ("eos", "commit", 1), ("eos", "commit", 2), ("eos", "commit", 3), ("eos-no-marker", "commit", 1),
        ("eos-no-marker", "process", 1), ("eos-no-marker", "process", 2)]
    assert dropped == [{"sink": "eos-no-marker", "workload": "keyed", "package": "commit", "seed": s,
                        "caught_at_seed": 1} for s in (2, 3)]
    kept, dropped = rest_of_group(cells, 7)  # the last cell: nothing after it
    assert kept == cells and dropped == []


def test_the_certificate_lists_the_seeds_not_run(tmp_path):
    skipped = rest_of_group(_cells(), 3)[1] + rest_of_group(_cells(), 6)[1]
    assert not_needed_text(skipped) == ("eos-no-marker × commit: seeds 2, 3 (caught at seed 1); "
                                        "eos-no-marker × process: seed 2 (caught at seed 1)")
    cell = {"sink": "eos-no-marker", "workload": "keyed", "package": "commit", "seed": 1, "expect": "invalid",
            "verdict": "invalid", "passed": True, "caught": True, "anomalies": {"duplicate": 2}, "elapsed_s": 60.0}
    paths = write_certificate({"suite": "mutants", "command": "onceproof test-all --mutants --stop-when-caught",
                               "versions": {}, "cells": [cell], "not_needed": skipped}, tmp_path)
    md, html = paths["md"].read_text(), paths["html"].read_text()
    assert NOT_NEEDED_NOTE.replace("`", "") in md.replace("`", "") and "seeds 2, 3 (caught at seed 1)" in md
    assert "seeds 2, 3 (caught at seed 1)" in html
