"""Check what a finished run ran on: ``python tests/ran_on.py RESULTS_ROOT name=version ...`` reads the newest
run under ``RESULTS_ROOT`` (its ``test.json`` versions, its ``results.json`` verdict and fault coverage) and
exits 1 naming the difference unless every ``name`` ran at ``version``, the verdict is valid and every planned
fault was effective and exercised (``make test-oldest``: the oldest PySpark on the oldest Kafka line)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    root, wanted = Path(argv[0]), dict(a.split("=", 1) for a in argv[1:])
    runs = sorted(root.rglob("test.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        print(f"no run under {root}")
        return 1
    run = runs[-1].parent
    versions = json.loads((run / "test.json").read_text())["versions"]
    result = json.loads((run / "results.json").read_text())
    bad = [f"{k}: ran {versions.get(k)!r}, wanted {v!r}" for k, v in wanted.items() if versions.get(k) != v]
    if result["verdict"] != "valid":
        bad.append(f"verdict {result['verdict']}")
    bad += [f"{c['fault']}: planned {c['planned']}, effective {c['effective']}, exercised {c['exercised']}"
            for c in result["coverage"] if not c["planned"] == c["effective"] == c["exercised"] >= 1]
    print(f"{run}: " + ("; ".join(bad) if bad else
                        "valid, every fault exercised, on " + ", ".join(f"{k} {v}" for k, v in wanted.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
