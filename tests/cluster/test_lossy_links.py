"""Lossy links (``nemesis/lossy.py``, the ``lossy`` package, issue 29 item 4) on the real local cluster.

One run carries every claim of the eos side: under ``lossy-link:reset-peer,timeout,limit-data,drop`` the eos
sink is valid, each turn effective with its own evidence (connections reset, a silent link closed after its
timeout, a connection closed after the byte limit, packets dropped by the run's iptables chain), and
afterwards neither an iptables chain or jump of the run nor a process of it is left.

A second test SIGKILLs the harness while the drop rule is in: the run's reaper removes the chain and its
jump. Both need root (iptables); without it the module is skipped, saying so.

About 4 + 1.5 minutes on 2 cores; ``make test-extended``.
"""

import os
import signal
import subprocess
import threading
import time

import pytest

from onceproof.backends.common import iptables
from tests.conftest import ONCEPROOF, REPO, load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended,
              pytest.mark.skipif(iptables.unavailable() is not None,
                                 reason=f"lossy-link:drop needs iptables: {iptables.unavailable()}")]

SPECS = ["lossy-link:reset-peer", "lossy-link:timeout", "lossy-link:limit-data", "lossy-link:drop"]


def _iptables_of(chain: str) -> list[str]:
    """Every line of ``iptables -S`` (all chains) that names ``chain``."""
    out = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, timeout=30).stdout
    return [ln for ln in out.splitlines() if chain in ln.split()]


@pytest.mark.timeout(1200)
def test_eos_is_valid_under_lossy_links_with_evidence_and_nothing_left(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", ",".join(SPECS), "--time-limit", "90", "--seed", "1",
                 "--results", str(results_root)], timeout=1100)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    turns = [o for o in ops if o["type"] == "info" and o.get("f") != "heal"]
    assert all(o["outcome"] == "effective" and o["exercised"] for o in turns), turns
    done = {o["f"]: o for o in turns}  # the last turn of each spec
    assert set(done) == set(SPECS), list(done)

    r = done["lossy-link:reset-peer"]["evidence"]
    assert r["toxic"]["type"] == "reset_peer" and 0 < r["toxic"]["toxicity"] < 1, r
    assert all("nemesis-lossy" in v for v in r["active"].values()), r
    assert any(lp["ended"] == "reset" for lp in r["link_probes"]), r["link_probes"]

    t = done["lossy-link:timeout"]["evidence"]
    assert [lp["ended"] for lp in t["link_probes"]] == ["closed"] and t["link_probes"][0]["bytes"] == 0, t
    assert t["link_probes"][0]["after_ms"] >= t["toxic"]["timeout"] * 0.9, t["link_probes"]
    assert not t["probe_during"]["ok"] and t["probe_after"]["ok"], t

    ld = done["lossy-link:limit-data"]["evidence"]
    lp = ld["link_probes"][0]
    assert lp["ended"] in ("closed", "reset") and 0 < lp["bytes"] <= ld["toxic"]["bytes"], ld

    d = done["lossy-link:drop"]["evidence"]
    assert d["chain"] == iptables.chain_name(str(run_dir)) and len(d["ports"]) == 2, d
    assert any("statistic" in rule and "DROP" in rule for rule in d["rules"]), d["rules"]
    c = d["counters_during"]
    assert c["dropped"] > 0 and c["seen"] > c["dropped"], c
    assert 0.02 < d["loss_ratio"] < 0.3, d  # 0.1 asked; a few hundred packets
    assert d["netem"], d  # why netem's delay/reorder/duplicate are not used, stated

    cov = {f"{row['fault']}:{row['target']}": row for row in result["coverage"]}
    # a second planned turn may not come before the run's budget ends (seen: limit-data planned 2, invoked 1)
    assert all(cov[s]["invoked"] == cov[s]["effective"] == cov[s]["exercised"] >= 1 for s in SPECS), cov
    assert result["stats"]["input_records"] == result["stats"]["output_records"] > 1000, result["stats"]
    assert (run_dir / iptables.NOTE).read_text().split() == [d["chain"]]
    assert _iptables_of(d["chain"]) == [], "the run's iptables chain or its jump is still there"
    assert not our_processes(str(run_dir))


@pytest.mark.timeout(600)
def test_a_sigkilled_harness_leaves_no_iptables_chain(results_root):
    """SIGKILL of the harness while ``lossy-link:drop`` holds its rule: no heal and no teardown run; the
    run's reaper (``backends/common/reaper.py``) removes the chain it finds in ``iptables-chains.txt``
    and its jump from INPUT, as it stops the run's processes."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="160")
    proc = subprocess.Popen([*ONCEPROOF, "run", "--nemesis", "lossy-link:drop", "--fault-hold", "120",
                             "--time-limit", "60", "--results", str(results_root)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    chain, run = "", None
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            if run is None and (results_root / "latest").exists():
                run = (results_root / "latest").resolve()
            if run is not None and (run / iptables.NOTE).exists():
                chain = iptables.chain_name(str(run))
                if any(ln.startswith("-A INPUT") for ln in _iptables_of(chain)):
                    break
            time.sleep(0.2)
        assert chain and proc.poll() is None, "the drop rule never came: " + "".join(lines)[-3000:]
        rules = _iptables_of(chain)
        assert any("statistic" in ln for ln in rules), rules
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        t_kill = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    while (_iptables_of(chain) or our_processes(str(run))) and time.monotonic() < t_kill + 30:
        time.sleep(0.5)
    assert _iptables_of(chain) == [], f"the reaper left the chain {chain} behind"
    assert not our_processes(str(run))
