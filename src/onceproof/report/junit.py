"""JUnit XML for one run (``run_dir/junit.xml``), so CI systems show a run's verdict as test results.

Shape (the de-facto JUnit format that Jenkins, GitLab and GitHub reporters read)::

    <testsuites name="onceproof" tests= failures= errors= skipped= time=>
      <testsuite name="onceproof" tests= failures= errors= skipped= time= timestamp=>
        <properties> test, verdict, seed, replay, run_dir, kafka, pyspark </properties>
        <testcase classname="onceproof.<test>" name="<anomaly>"/>      one per anomaly type
        <testcase classname="onceproof.<test>" name="recovery"/>
        <testcase classname="onceproof.<test>" name="faults-took-effect"/>
      </testsuite>
    </testsuites>

* **one testcase per anomaly type**: every name in ``results.json`` ``counts`` and ``anomalies`` (a name
  added to the checker later needs no change here). A count named ``<a>-records`` next to a count ``<a>``
  (``duplicate-records``: the extra copies) is a detail of ``<a>``, not a type of its own: it goes into
  ``<a>``'s message. Count > 0 → ``<failure>`` whose message has the count and whose text has the first
  examples as JSON. A crashed run with no counts lists the checker's ``ANOMALIES``, each ``<skipped>``.
* **recovery**: verdict ``unknown`` or ``recovery.finished`` false → ``<failure>`` carrying the
  ``unknown_reasons`` ("recovery did not finish" when it did not, else "verdict unknown", e.g. a
  history cut short); verdict ``crashed`` (or no ``results.json``) → ``<error>`` carrying ``error``.
* **faults-took-effect**: every requested fault (``test.json`` ``faults``, else ``config.nemesis``) must have
  at least one ``effective`` op, else ``<failure>`` (a run whose faults never landed proves nothing). No faults
  requested → passes with a note; a crashed run → ``<skipped>`` (the crash is already the error).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from onceproof.checkers.exactly_once import ANOMALIES
from onceproof.report.analysis import anomaly_names
from onceproof.store import readers
from onceproof.store.runfiles import RESULTS, RunFiles

SUITE = "onceproof"
MAX_EXAMPLES_IN_FAILURE = 3
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(s) -> str:
    """Text safe for XML 1.0 (control characters from exception messages are dropped)."""
    return _XML_BAD.sub("", "" if s is None else str(s))


def anomaly_cases(results: dict) -> list[tuple[str, int | None, dict[str, int]]]:
    """``(anomaly name, count or None, {sub-count name: n})`` per anomaly type, in results order."""
    counts = results.get("counts") or {}
    names = anomaly_names(results)
    subs = {n for n in names if n.endswith("-records") and n.removesuffix("-records") in names}
    out = []
    for n in names:
        if n in subs:
            continue
        details = {s: counts[s] for s in subs if s.removesuffix("-records") == n and s in counts}
        c = counts.get(n)
        out.append((n, int(c) if isinstance(c, (int, float)) else None, details))
    return out


def _examples_text(examples: list) -> str:
    lines = [json.dumps(x, default=str, sort_keys=False) for x in examples[:MAX_EXAMPLES_IN_FAILURE]]
    if len(examples) > MAX_EXAMPLES_IN_FAILURE:
        lines.append(f"... {len(examples) - MAX_EXAMPLES_IN_FAILURE} more examples in {RESULTS}")
    return "\n".join(lines)


def build_junit(run_dir: Path) -> ET.Element:
    """The ``<testsuites>`` element for ``run_dir`` (reads ``results.json``, ``test.json``)."""
    run_dir = Path(run_dir)
    results = readers.read_or_none(readers.read_results, run_dir)
    test = readers.read_or_none(readers.read_test, run_dir) or {}
    r = results or {"verdict": "crashed", "error": f"{RESULTS} is missing or unreadable"}
    verdict = str(r.get("verdict") or "crashed")
    name = str(r.get("test") or test.get("name") or run_dir.name)
    classname = f"{SUITE}.{name}"
    cases: list[ET.Element] = []

    def case(case_name: str, time_s: float = 0.0) -> ET.Element:
        el = ET.Element("testcase", classname=classname, name=case_name, time=f"{float(time_s or 0):.3f}")
        cases.append(el)
        return el

    # -- anomaly types
    listed = anomaly_cases(r)
    if not listed and verdict == "crashed":

        listed = [(a, None, {}) for a in ANOMALIES]
    anomalies = r.get("anomalies") or {}
    for a, n, details in listed:
        el = case(a)
        exs = list(anomalies.get(a) or [])
        if n is None and not exs:
            ET.SubElement(el, "skipped", message=_clean(
                f"not checked: the run {'crashed' if verdict == 'crashed' else 'has no count for ' + a}"))
        elif (n or 0) > 0 or (n is None and exs):
            extra = "".join(f", {v} {k}" for k, v in details.items())
            msg = f"{n if n is not None else len(exs)} {a}{extra}"
            f = ET.SubElement(el, "failure", message=_clean(msg), type=a)
            f.text = _clean(_examples_text(exs) or "(no examples recorded)")
        elif any(details.values()):
            ET.SubElement(el, "system-out").text = _clean(", ".join(f"{k}={v}" for k, v in details.items()))

    # -- recovery
    rec = r.get("recovery") or {}
    el = case("recovery", rec.get("seconds") or 0.0)
    reasons = list(r.get("unknown_reasons") or []) or list(rec.get("reasons") or [])
    if verdict == "crashed":
        e = ET.SubElement(el, "error", message=_clean(f"run crashed: {r.get('error', 'no error recorded')}"),
                          type="crashed")
        e.text = _clean("\n".join([str(r.get("error", "")), *reasons]))
    elif verdict == "unknown" or rec.get("finished") is False:
        head = "recovery did not finish" if rec.get("finished") is False else "verdict unknown"
        f = ET.SubElement(el, "failure", message=_clean(f"{head}: " + ("; ".join(reasons) or "no reason recorded")),
                          type="unknown")
        f.text = _clean("\n".join(reasons))
    elif rec:
        ET.SubElement(el, "system-out").text = _clean(f"recovery finished in {rec.get('seconds', '?')} s")

    # -- faults took effect
    el = case("faults-took-effect")
    faults = r.get("faults") or {}
    # test.json "faults": what the run injects (``all`` without what its sink cannot take); older runs: config
    requested = list(test.get("faults") or (test.get("config") or {}).get("nemesis") or []) or list(faults)
    if not requested:
        ET.SubElement(el, "system-out").text = "no faults requested"
    else:
        never = [f for f in requested if not (faults.get(f) or {}).get("effective")]
        summary = "; ".join(f"{f}: " + (", ".join(f"{o}={n}" for o, n in (faults.get(f) or {}).items()) or "no ops")
                            for f in requested)
        if verdict == "crashed":  # the crash is the error (recovery); a fault cut short by it is not news
            ET.SubElement(el, "skipped", message=_clean(f"not evaluated: the run crashed ({summary})"))
        elif never:
            fl = ET.SubElement(el, "failure", message=_clean(f"never took effect: {', '.join(never)}"),
                               type="not-effective")
            fl.text = _clean(summary)
        else:
            ET.SubElement(el, "system-out").text = _clean(summary)

    n_fail = sum(1 for c in cases if c.find("failure") is not None)
    n_err = sum(1 for c in cases if c.find("error") is not None)
    n_skip = sum(1 for c in cases if c.find("skipped") is not None)
    total = f"{float((r.get('timings') or {}).get('total_s') or 0):.3f}"
    counts = {"tests": str(len(cases)), "failures": str(n_fail), "errors": str(n_err), "skipped": str(n_skip),
              "time": total}
    root = ET.Element("testsuites", name=SUITE, **counts)
    suite = ET.SubElement(root, "testsuite", name=SUITE, **counts)
    if test.get("started"):
        suite.set("timestamp", _clean(test["started"]))
    props = ET.SubElement(suite, "properties")
    for k, v in (("test", name), ("verdict", verdict), ("seed", r.get("seed", (test.get("config") or {}).get("seed"))),
                 ("replay", r.get("replay") or test.get("replay")), ("run_dir", str(run_dir.resolve())),
                 *((k, (test.get("versions") or {}).get(k)) for k in ("kafka", "pyspark"))):
        if v is not None:
            ET.SubElement(props, "property", name=k, value=_clean(v))
    suite.extend(cases)
    return root


def write_junit(run_dir: Path) -> Path:
    """Write ``run_dir/junit.xml`` (see the module docstring) and return its path."""
    run_dir = Path(run_dir)
    root = build_junit(run_dir)
    ET.indent(root)
    out = RunFiles(run_dir).junit
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
    return out
