"""Fault coverage: did the run test what it claims to? (Antithesis's "sometimes" assertions.)

A checker can only say ``valid`` about what happened. A run in which the pipeline carried no traffic,
or in which a requested fault ran but hit nothing (an executor killed between micro-batches, a
"leader" killed after leadership had already moved), has tested nothing about it; calling it valid
would be a vacuous pass. So:

* :func:`table` — per planned spec (``fault:target``): planned / invoked / effective / exercised
  counts and the other outcomes (``results.json["coverage"]``, the report's coverage table);
* :func:`judge` — a ``valid`` verdict becomes ``unknown`` with reason ``no-traffic`` when the input or
  output is empty, and ``fault-not-exercised: <spec>`` for each planned spec never exercised.
  ``invalid`` stays ``invalid``: an anomaly found is found, whatever the coverage.

Pure: plan (``[(at_s, spec)]``, as in ``test.json``), nemesis ops (``nemesis.jsonl`` completions) and the
checker's result dict in, dicts out.
"""

from __future__ import annotations

from collections import Counter


def table(plan: list, ops: list[dict]) -> list[dict]:
    """``[{"fault", "target", "planned", "invoked", "effective", "exercised", "other": {outcome: n}}]``,
    one row per spec in the plan (in plan order), counts in fault turns."""
    planned = Counter(spec for _, spec in plan)
    done = [op for op in ops if op.get("type") == "info" and op.get("f") in planned and "outcome" in op]
    rows = []
    for spec in dict.fromkeys(spec for _, spec in plan):
        mine = [op for op in done if op["f"] == spec]
        outcomes = Counter(op["outcome"] for op in mine)
        name, _, target = spec.partition(":")
        rows.append({"fault": name, "target": target or "-", "planned": planned[spec], "invoked": len(mine),
                     "effective": outcomes.get("effective", 0),
                     # ops written before exercised existed: effective counted as exercised
                     "exercised": sum(1 for op in mine if op["outcome"] == "effective" and op.get("exercised", True)),
                     "other": {k: v for k, v in outcomes.items() if k != "effective"}})
    return rows


def why_not(ops: list[dict], spec: str, limit: int = 2) -> list[str]:
    """The distinct ``evidence.reason`` lines (≤ ``limit``) of ``spec``'s turns that were not exercised,
    in history order: what a fault said about why it did not take effect."""
    out: list[str] = []
    for op in ops:
        if op.get("type") != "info" or op.get("f") != spec or "outcome" not in op:
            continue
        if op["outcome"] == "effective" and op.get("exercised", True):
            continue
        why = (op.get("evidence") or {}).get("reason")
        if isinstance(why, str) and why and why not in out:
            out.append(why)
    return out[:limit]


def judge(result: dict, plan: list, ops: list[dict], workload_stopped: str | None = None) -> dict:
    """``result`` with ``coverage`` added and, if it was ``valid``, the verdict lowered to ``unknown``
    when the run carried no traffic, the workload stopped sending before the run phase ended
    (``workload_stopped``: the client's ``stopped_by``; the faults after it met no new input), or a
    planned fault was never exercised (reasons in ``unknown_reasons``, each starting with
    ``no-traffic``, ``workload-stopped`` or ``fault-not-exercised``, the latter ending with the faults'
    own reasons, :func:`why_not`)."""
    r = dict(result)
    cov = table(plan, ops)
    r["coverage"] = cov
    reasons = []
    st = r.get("stats") or {}
    if st and (not st.get("input_records") or not st.get("output_records")):
        reasons.append(f"no-traffic: input {st.get('input_records', 0)} records, output "
                       f"{st.get('output_records', 0)} records; nothing was tested")
    if workload_stopped:
        reasons.append(f"workload-stopped: the workload stopped sending at {workload_stopped}, before the run "
                       "phase ended, so the faults after it met no new input (a bug in onceproof's client: "
                       "please report it with this run's logs/)")
    for row in cov:
        if row["exercised"] == 0:
            spec = row["fault"] + ("" if row["target"] == "-" else f":{row['target']}")
            seen = ", ".join(f"{k}={v}" for k, v in {"effective": row["effective"], **row["other"]}.items() if v)
            why = "; ".join(why_not(ops, spec))
            reasons.append(f"fault-not-exercised: {spec} (planned {row['planned']}, invoked {row['invoked']}"
                           + (f": {seen}" if seen else "") + ")" + (f": {why}" if why else ""))
    if r.get("verdict") == "valid" and reasons:
        r["verdict"], r["valid"] = "unknown", "unknown"
        r["unknown_reasons"] = list(r.get("unknown_reasons") or []) + reasons
    elif reasons:
        r["coverage_warnings"] = reasons
    return r
