"""The verdict on the console: anomaly counts with a first example, fault coverage or fault counts, why a
run is unknown, where its results are (``onceproof run`` and ``onceproof check`` print the same), and the
one-line forms of a nemesis op the runner prints as faults happen. Reads a ``results.json`` dict only.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from onceproof.checkers import advice
from onceproof.checkers.compose import ANOMALIES
from onceproof.checkers.exactly_once import order_unjudged
from onceproof.checkers.platform import platform_lines
from onceproof.sinks import user_outputs


def brief(ev: dict) -> str:
    """The evidence keys worth a console line (batch, pid, executor, ...), as ``k=v`` words."""
    keys = ("batch", "pid", "executor_id", "offsets_logged", "commit_logged_after_kill", "shrink_s", "restore_s",
            "reason")
    return " ".join(f"{k}={ev[k]}" for k in keys if k in ev)


def fault_counts(ops: list[dict]) -> dict[str, dict[str, int]]:
    """``{fault spec: {outcome: turns}}`` of the nemesis ops (``results.json["faults"]``)."""
    out: dict[str, dict[str, int]] = {}
    for op in ops:
        d = out.setdefault(op["f"], {})
        d[op["outcome"]] = d.get(op["outcome"], 0) + 1
    return out


def summarize(result: dict, console: Console) -> None:
    """Print the verdict, anomaly counts and faults as tables."""
    v = result.get("verdict", "crashed")
    color = {"valid": "green", "invalid": "red", "unknown": "yellow"}.get(v, "magenta")
    t = Table(title=f"{result.get('test', '')}: [{color} bold]{v.upper()}[/]")
    t.add_column("anomaly")
    t.add_column("count", justify="right")
    t.add_column("first example")
    counts = result.get("counts", {})
    unjudged = order_unjudged(result)
    for a in list(counts) or ANOMALIES:  # the workload checker's anomalies, then the transaction checks
        ex = (result.get("anomalies", {}).get(a) or [None])[0]
        if a == "nonmonotonic" and unjudged:
            t.add_row(a, "-", f"order per key: {unjudged}")
            continue
        t.add_row(a, str(counts.get(a, "-")), _short(ex))
    console.print(t)
    for name, entry in (result.get("advice") or {}).items():
        console.print(f"[bold]{name}[/]: {advice.line(entry)}", soft_wrap=True, markup=True, highlight=False)
    if result.get("coverage"):
        ct = Table(title="fault coverage (turns)")
        for c in ("fault", "target", "planned", "effective", "exercised", "other"):
            ct.add_column(c, justify="left" if c in ("fault", "target", "other") else "right")
        for row in result["coverage"]:
            style = "" if row["exercised"] else "yellow"
            ct.add_row(row["fault"], row["target"], str(row["planned"]), str(row["effective"]),
                       f"[{style}]{row['exercised']}[/]" if style else str(row["exercised"]),
                       ", ".join(f"{k}={n}" for k, n in row["other"].items()))
        console.print(ct)
    elif result.get("faults"):
        ft = Table(title="faults")
        ft.add_column("fault")
        ft.add_column("effective", justify="right")
        ft.add_column("other")
        for f, d in result["faults"].items():
            ft.add_row(f, str(d.get("effective", 0)), ", ".join(f"{k}={n}" for k, n in d.items() if k != "effective"))
        console.print(ft)
    for line in platform_lines(result):
        console.print(f"[yellow]{line}[/]", soft_wrap=True)
    for r in result.get("unknown_reasons", []):
        console.print(f"[yellow]unknown because: {r}[/]")
    if result.get("query_stopped") and result.get("verdict") != "unknown":
        console.print(f"[yellow]the query stopped: {result['query_stopped']}[/]", soft_wrap=True, highlight=False)
    if result.get("error"):
        console.print(f"[magenta]error: {result['error']}[/]")
    st = result.get("stats", {})
    if st:
        console.print(f"input {st.get('input_records')} records, output {st.get('output_records')} records, "
                      f"{st.get('keys')} keys; sends ok={st.get('sends_ok')} info={st.get('sends_info')} "
                      f"fail={st.get('sends_fail')}; driver restarts={result.get('driver_restarts')}")
    for line in user_outputs.output_lines(result):  # e.g. the file sink's files and orphans
        console.print(line)
    if st.get("liveness"):
        console.print(liveness_line(st))
    console.print(f"results: {result.get('run_dir')}")


def liveness_line(stats: dict) -> str:
    """One console line of the liveness figures: recovery after the last heal (s), visibility latency
    p50/p99/max (ms), the worst visibility outside fault windows against its bound (s), the longest LSO
    pin (s)."""
    lv, vis = stats["liveness"], stats.get("visibility_latency_ms") or {}
    rec = lv.get("last_heal_recovery_s")
    pins = lv.get("lso_pin_max_s") or {}
    bits = [f"recovery after the last heal {rec:g} s" if rec is not None else "recovery after the last heal: —"]
    if vis:
        bits.append("visibility p50/p99/max " + "/".join(f"{vis.get(k, 0):,.0f}" for k in ("p50", "p99", "max"))
                    + " ms")
    worst = lv.get("visibility_outside_faults_max_s")
    if worst is not None:
        bits.append(f"worst outside faults {worst:g} s of a {lv['bounds']['visibility_s']:g} s bound")
    bits.append(f"longest LSO pin {max(pins.values()):g} s" if pins else "no LSO pin")
    return "liveness: " + "; ".join(bits)


def _short(ex) -> str:
    if ex is None:
        return ""
    if "copies" in ex:
        batches = sorted({c.get("batch", "?") for c in ex["copies"]})
        return f"key={ex['key']} seq={ex['seq']} ×{len(ex['copies'])} batch={','.join(batches)}"
    return " ".join(f"{k}={v}" for k, v in list(ex.items())[:6])
