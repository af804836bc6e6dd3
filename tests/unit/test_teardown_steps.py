"""Teardown steps are independent and bounded (issue 7 item 8), and a run keeps executor logs, not jars
(item 18). Pure pieces: no cluster."""

import threading
import time
from contextlib import ExitStack

from onceproof.backends.common import supervisor
from onceproof.harness import teardown


def test_a_failing_step_does_not_skip_the_others_and_is_recorded():
    ran = []
    stack = ExitStack()
    td = teardown.Teardown(stack)
    with stack:  # LIFO: pushed last, runs first
        td.push("proxy stop", lambda: ran.append("proxy"))
        td.push("cluster down", lambda: ran.append("cluster"))
        td.push("driver stop", lambda: (_ for _ in ()).throw(RuntimeError("sup.stop blew up")))
        td.push("workload stop", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert ran == ["cluster", "proxy"]
    assert [e.split(":")[0] for e in td.errors] == ["workload stop", "driver stop"]
    assert set(td.steps) == {"proxy stop", "cluster down", "driver stop", "workload stop"}


def test_the_watchdog_kills_what_a_hung_step_waits_for(monkeypatch):
    monkeypatch.setattr(teardown, "TEARDOWN_BOUND_S", 0.3)
    gone = threading.Event()
    stack = ExitStack()
    td = teardown.Teardown(stack)
    td.track(gone.set)  # the "process group" the hung step waits on
    t = time.monotonic()
    with stack:
        td.push("hung step", lambda: gone.wait(30))
        td.begin()
    td.end()
    assert gone.is_set() and time.monotonic() - t < 5
    assert any(e.startswith("watchdog") for e in td.errors)


def test_executor_logs_are_kept_and_the_work_dir_with_its_jars_removed(tmp_path, monkeypatch):
    work = tmp_path / "pyspark" / "work"
    jars_dir = tmp_path / "pyspark" / "jars"
    jars_dir.mkdir(parents=True)
    monkeypatch.setattr(supervisor.jars, "pyspark_jars_dir", lambda: jars_dir)
    app = work / "app-1"
    for ex in ("0", "1"):
        (app / ex).mkdir(parents=True)
        (app / ex / "stderr").write_text(f"executor {ex} log")
        (app / ex / "stdout").write_text("")
        (app / ex / "spark-sql-kafka.jar").write_bytes(b"x" * 4096)
    control = tmp_path / "control"
    control.mkdir()
    (control / "driver.apps.jsonl").write_text('{"app_id": "app-1"}\n')
    dest = tmp_path / "logs" / "executors"
    assert supervisor.collect_executor_logs(control, dest) == 1
    assert (dest / "app-1" / "1" / "stderr").read_text() == "executor 1 log"
    assert not list(dest.rglob("*.jar"))
    assert not app.exists()
