"""``onceproof watch``: the live terminal view of a running session, built on textual.

It draws the supervisor's live snapshot (:mod:`onceproof.harness.session.live`, rewritten each second)
every :data:`REFRESH_S`, and its keys send the same spool commands as ``onceproof nemesis`` / ``heal``
(:mod:`onceproof.harness.session.spool`), so a fault injected from the view is a manual op in
``nemesis.jsonl`` like any other. Leaving the view (``q``, Ctrl-C) leaves the session running.

The panels are pure functions of the snapshot (``render_*``), so a snapshot file is all a test needs.
"""

from __future__ import annotations

import time

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, Header, Static

from onceproof.harness.session import live
from onceproof.harness.session.spool import Spool, SpoolTimeout
from onceproof.harness.session.state import LIVE, SessionState

REFRESH_S = 0.5
"""How often the view re-reads the snapshot (s); the supervisor rewrites it every second."""
HOLD_S = 10.0
"""The hold of a fault injected with ``t`` (s); ``i`` holds it until healed."""
STALE_S = 5.0
"""A snapshot older than this (s) is shown as stale: the supervisor is busy (stopping) or gone."""


_UP = ("running", "sleeping", "disk-sleep", "idle")
"""psutil's states of a process that is up (not paused, not gone)."""


def _n(v, unit: str = "") -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}{unit}"
    return f"{int(v):,}{unit}"


def render_flow(s: dict) -> Table:
    """Input and output rates, totals and the pipeline's lag."""
    t = Table.grid(padding=(0, 2))
    i, o, lag = s.get("input") or {}, s.get("output") or {}, s.get("lag") or {}
    t.add_row("input", _n(i.get("rate_per_s"), "/s"), f"acked {_n(i.get('acked'))}",
              f"info {_n(i.get('info'))} · fail {_n(i.get('fail'))}")
    t.add_row("output", _n(o.get("rate_per_s"), "/s"), f"seen {_n(o.get('seen'))}", "")
    t.add_row("lag", _n(lag.get("records")), "records", "acked, not yet in a committed batch")
    return t


def render_batch(s: dict) -> Table:
    """The last committed micro-batch: its id, duration and age, and the batch planned next."""
    b = s.get("batch") or {}
    t = Table.grid(padding=(0, 2))
    t.add_row("committed", _n(b.get("id")), "took", _n(b.get("duration_s"), " s"))
    t.add_row("planned", _n(b.get("planned")), "ago", _n(b.get("age_s"), " s"))
    inflight = b.get("planned") is not None and b.get("planned") != b.get("id")
    t.add_row("state", Text("batch in flight" if inflight else "between batches", style="cyan" if inflight else ""))
    return t


def render_anomalies(s: dict) -> Table:
    """Running anomaly counts from the live reader (red when any)."""
    t = Table.grid(padding=(0, 2))
    for k, v in (s.get("anomalies") or {}).items():
        t.add_row(k, Text(_n(v), style="bold red" if v else "green"))
    t.add_row("rereads", _n((s.get("output") or {}).get("rereads")))
    return t


def render_partitions(s: dict) -> Table:
    """The output topic per partition: LSO, HW and HW − LSO (an open transaction pins the LSO)."""
    t = Table("partition", "LSO", "HW", "open (HW−LSO)", box=None, padding=(0, 1))
    for p in s.get("partitions") or []:
        t.add_row(str(p["partition"]), _n(p["lso"]), _n(p["hw"]),
                  Text(_n(p["open"]), style="yellow" if p["open"] else "dim" if p["open"] is None else ""))
    t.caption = f"open transactions: {_n(s.get('open_transactions'))}"
    return t


def render_processes(s: dict) -> Table:
    """The driver, executors and brokers with their states and restarts."""
    t = Table.grid(padding=(0, 2))
    d = s.get("driver") or {}
    t.add_row("driver", Text(f"pid {d['pid']}" if d.get("pid") else "down", style="" if d.get("pid") else "red"),
              f"restarts {_n(d.get('restarts'))}")
    ex = s.get("executors") or []
    lost = s.get("executors_lost") or []
    t.add_row("executors", " ".join(f"{e['id']}" for e in ex) or Text("none", style="red"),
              f"lost {len(lost)}" + (f" ({', '.join(lost)})" if lost else ""))
    for b in s.get("brokers") or []:
        st = b.get("status", "?")
        shown = "up" if st in _UP else "paused" if st == "stopped" else st
        t.add_row(f"broker {b['node']}", Text(shown, style={"up": "", "paused": "yellow"}.get(shown, "red")), "")
    return t


def render_faults(s: dict) -> Table:
    """The faults in effect with their age and hold."""
    t = Table("fault", "age", "for", box=None, padding=(0, 1))
    for f in s.get("faults") or []:
        t.add_row(Text(f["f"], style="bold red"), _n(f.get("age_s"), " s"),
                  _n(f.get("for_s"), " s") if f.get("for_s") else "until healed")
    if not s.get("faults"):
        t.add_row(Text("none", style="dim"), "", "")
    return t


class WatchApp(App):
    """The view of session ``state``; keys inject and heal the faults the session can take."""

    TITLE = "onceproof watch"
    CSS = """
    Horizontal { height: auto; }
    .panel { border: round $primary; padding: 0 1; width: 1fr; height: auto; }
    #menu { border: round $secondary; width: 1fr; height: 12; }
    #message { height: 1; padding: 0 1; }
    """
    BINDINGS = [
        Binding("i", "inject", "inject (until healed)"),
        Binding("t", "inject_for", f"inject for {HOLD_S:.0f}s"),
        Binding("h", "heal", "heal selected"),
        Binding("a", "heal_all", "heal all"),
        Binding("q", "quit", "leave (session keeps running)"),
        Binding("ctrl+c", "quit", "leave", show=False, priority=True),
    ]

    def __init__(self, state: SessionState, refresh_s: float = REFRESH_S):
        super().__init__()
        self.state, self.refresh_s = state, refresh_s
        self.spool = Spool(state.spool_dir)
        self._menu: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield Static(id="flow", classes="panel")
            yield Static(id="batch", classes="panel")
            yield Static(id="anomalies", classes="panel")
        with Horizontal():
            yield Static(id="partitions", classes="panel")
            yield Static(id="processes", classes="panel")
        with Horizontal():
            yield Static(id="faults", classes="panel")
            with Vertical(id="menu"):
                yield DataTable(id="menu-table", cursor_type="row")
        yield Static(id="message")
        yield Footer()

    def on_mount(self) -> None:
        titles = {"flow": "flow", "batch": "micro-batch", "anomalies": "anomalies so far (live reader)",
                  "partitions": "output partitions", "processes": "processes", "faults": "faults in effect",
                  "menu": "faults: ↑↓ select, i/t inject, h heal"}
        for wid, title in titles.items():
            self.query_one(f"#{wid}").border_title = title
        self.query_one("#menu-table", DataTable).add_column("fault", key="fault")
        self.refresh_view()
        self.set_interval(self.refresh_s, self.refresh_view)

    def refresh_view(self) -> None:
        """Re-read the state and the snapshot; redraw every panel (nothing once the view is closing: its
        interval can fire after the panels were removed)."""
        try:
            self._redraw()
        except NoMatches:
            return

    def _redraw(self) -> None:
        st = self.state.read()
        snap = live.read(self.state.live)
        age = time.time() - snap["t"] if snap.get("t") else None
        phase = st.get("state", "?")
        stale = phase in LIVE and (age is None or age > STALE_S)
        self.sub_title = (f"session {self.state.sid} · {phase}" + (" · snapshot stale" if stale else "")
                          + (f" · up for {snap['up_s']:.0f} s" if snap.get("up_s") is not None else "")
                          + (f" · {st['verdict'].upper()}" if st.get("verdict") else ""))
        for wid, fn in (("flow", render_flow), ("batch", render_batch), ("anomalies", render_anomalies),
                        ("partitions", render_partitions), ("processes", render_processes),
                        ("faults", render_faults)):
            self.query_one(f"#{wid}", Static).update(fn(snap))
        menu = list(st.get("faults_available") or [])
        if menu != self._menu:
            table = self.query_one("#menu-table", DataTable)
            table.clear()
            for f in menu:
                table.add_row(f, key=f)
            self._menu = menu

    def selected(self) -> str | None:
        """The fault under the menu's cursor."""
        table = self.query_one("#menu-table", DataTable)
        if not self._menu or table.cursor_row is None or table.cursor_row >= len(self._menu):
            return None
        return self._menu[table.cursor_row]

    def say(self, text: str, error: bool = False) -> None:
        self.query_one("#message", Static).update(Text(text, style="red" if error else "green"))

    def _command(self, cmd: str, args: dict) -> None:
        """Send ``cmd`` without blocking the view; its reply is shown when it comes."""
        self.say(f"{cmd} {args.get('f') or 'all'} …")

        def work() -> None:
            try:
                reply = self.spool.wait(self.spool.send(cmd, args), 120.0, alive=self.state.supervisor_alive)
            except SpoolTimeout as e:
                reply = {"ok": False, "message": str(e)}
            self.call_from_thread(self.say, reply.get("message", ""), not reply.get("ok"))

        self.run_worker(work, thread=True, exclusive=False)

    def action_inject(self) -> None:
        if f := self.selected():
            self._command("nemesis", {"f": f, "for_s": None})

    def action_inject_for(self) -> None:
        if f := self.selected():
            self._command("nemesis", {"f": f, "for_s": HOLD_S})

    def action_heal(self) -> None:
        if f := self.selected():
            self._command("heal", {"f": f})

    def action_heal_all(self) -> None:
        self._command("heal", {"f": None})
