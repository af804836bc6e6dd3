"""onceproof.backends.common.toxiproxy against a real toxiproxy server (built from its Go module) and a
plain TCP echo server.

No mocks: every fault is measured on real sockets through the proxy. The first run builds toxiproxy
(about half a minute, then cached under ``cache_dir()``); each test then takes at most a few seconds.
"""

from __future__ import annotations

import itertools
import os
import socket
import socketserver
import subprocess
import threading
import time

import psutil
import pytest

from onceproof.backends.common import processes
from onceproof.backends.common.toxiproxy import (
    TOXIPROXY_VERSION,
    ToxiproxyBuildError,
    ToxiproxyClient,
    ToxiproxyError,
    ToxiproxyServer,
    ToxiproxyStartError,
    build_server,
    free_port,
    server_dir,
)

pytestmark = pytest.mark.timeout(600)  # the first, uncached Go build is in the fixtures' setup

FAST_S = 0.25  # a round trip with no latency toxic: well under the 300 ms toxics, with room for a busy CPU

# ----------------------------------------------------------------------------------------------- fixtures


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            pass


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def echo():
    """A TCP echo server on 127.0.0.1: the proxies' upstream. Yields its ``host:port``."""
    srv = _EchoServer(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ToxiproxyServer().start(tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log")
    yield srv
    srv.stop()


@pytest.fixture
def client(server) -> ToxiproxyClient:
    return server.client


_names = itertools.count()


@pytest.fixture
def proxy(client, echo):
    """A fresh proxy 127.0.0.1:<free port> → echo server. Yields ``(name, (host, port))``."""
    name = f"echo{next(_names)}"
    created = client.create_proxy(name, f"127.0.0.1:{free_port()}", echo)
    host, port = created["listen"].rsplit(":", 1)
    yield name, (host, int(port))
    client.reset()
    client.delete_proxy(name)


# ---------------------------------------------------------------------------------------------- helpers


def roundtrip(addr, payload: bytes = b"ping", sock: socket.socket | None = None) -> tuple[bytes, float]:
    """Send ``payload`` through the proxy and read it back; returns (data, seconds)."""
    own = sock is None
    s = sock or socket.create_connection(addr, timeout=5)
    try:
        t0 = time.monotonic()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got, time.monotonic() - t0
    finally:
        if own:
            s.close()


def transfer(addr, nbytes: int) -> float:
    """Echo ``nbytes`` through the proxy (sending and receiving concurrently); returns seconds."""
    payload = os.urandom(nbytes)
    with socket.create_connection(addr, timeout=10) as s:
        t0 = time.monotonic()
        sender = threading.Thread(target=s.sendall, args=(payload,))
        sender.start()
        got = bytearray()
        while len(got) < nbytes:
            chunk = s.recv(65536)
            assert chunk, f"connection closed after {len(got)} of {nbytes} bytes"
            got += chunk
        elapsed = time.monotonic() - t0
        sender.join()
    assert bytes(got) == payload
    return elapsed


def closed_within(s: socket.socket, timeout_s: float) -> bool:
    """True when the peer closes or resets ``s`` within ``timeout_s`` seconds."""
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


# ------------------------------------------------------------------------------------------------ tests


def test_build_is_cached_and_pinned():
    first = build_server()  # builds when the cache is cold (≈ 30 s), else reuses
    t0 = time.monotonic()
    binary = build_server()
    assert binary == first
    assert time.monotonic() - t0 < 2.0, "a built server must be reused, not rebuilt"
    assert binary == server_dir() / "toxiproxy-server" and os.access(binary, os.X_OK)
    assert (server_dir() / ".complete").read_text().strip() == TOXIPROXY_VERSION
    out = subprocess.run([str(binary), "-version"], capture_output=True, text=True, timeout=10).stdout
    assert TOXIPROXY_VERSION.lstrip("v") in out


def test_build_without_go_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path))  # nothing cached there
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(ToxiproxyBuildError, match=r"`go` is not on PATH: install Go 1\.23"):
        build_server()


def test_server_answers_version(server, client):
    assert server.url == f"http://127.0.0.1:{server.port}"
    assert client.version() == TOXIPROXY_VERSION.lstrip("v")


def test_create_list_delete_and_echo(client, echo):
    listen = f"127.0.0.1:{free_port()}"
    p = client.create_proxy("crud", listen, echo)
    assert (p["name"], p["listen"], p["upstream"], p["enabled"]) == ("crud", listen, echo, True)
    assert "crud" in client.proxies()
    assert client.get_proxy("crud")["toxics"] == []
    host, port = listen.split(":")
    assert roundtrip((host, int(port)), b"hello through toxiproxy")[0] == b"hello through toxiproxy"
    client.delete_proxy("crud")
    assert "crud" not in client.proxies()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2)


def test_disable_cuts_the_path_and_enable_restores_it(client, proxy):
    name, addr = proxy
    open_conn = socket.create_connection(addr, timeout=5)
    assert roundtrip(addr, b"a", sock=open_conn)[0] == b"a"

    assert client.set_enabled(name, False)["enabled"] is False
    assert closed_within(open_conn, 2.0), "disabling must close existing connections"
    open_conn.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(addr, timeout=2)

    assert client.set_enabled(name, True)["enabled"] is True
    assert roundtrip(addr, b"back")[0] == b"back"


def test_latency_toxic_delays_round_trip_until_removed(client, proxy):
    name, addr = proxy
    assert min(roundtrip(addr)[1] for _ in range(3)) < FAST_S
    toxic = client.add_toxic(name, "latency", {"latency": 300, "jitter": 0})
    assert (toxic["name"], toxic["stream"], toxic["attributes"]["latency"]) == (
        "latency_downstream", "downstream", 300)
    assert [t["name"] for t in client.toxics(name)] == ["latency_downstream"]
    data, slow = roundtrip(addr, b"slow")
    assert data == b"slow" and slow >= 0.3, slow
    client.remove_toxic(name, "latency_downstream")
    assert client.toxics(name) == []
    assert roundtrip(addr)[1] < FAST_S


def test_upstream_latency_and_named_toxic(client, proxy):
    name, addr = proxy
    client.add_latency(name, 300, stream="upstream", name="slow-requests")
    assert client.toxics(name)[0]["stream"] == "upstream"
    assert roundtrip(addr)[1] >= 0.3
    client.update_toxic(name, "slow-requests", {"latency": 0})
    assert roundtrip(addr)[1] < FAST_S


def test_bandwidth_toxic_slows_a_200kb_transfer(client, proxy):
    name, addr = proxy
    size = 200_000
    baseline = transfer(addr, size)
    client.add_bandwidth(name, 200)  # 200 KB/s downstream: 200 KB take ≈ 1 s
    limited = transfer(addr, size)
    assert limited >= 0.8 and limited > 2 * baseline, (baseline, limited)


def test_limit_data_and_reset_peer_close_connections(client, proxy):
    name, addr = proxy
    client.add_limit_data(name, 10)
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(b"x" * 100)
        got = b""
        while chunk := s.recv(100):
            got += chunk
        assert len(got) <= 10
    client.reset()

    client.add_reset_peer(name, 0, stream="upstream")
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(b"hello")
        assert closed_within(s, 2.0)


def test_other_toxic_types_are_accepted(client, proxy):
    name, _ = proxy
    client.add_slicer(name, average_size=64, size_variation=16, delay_us=10)
    client.add_timeout(name, 0, stream="upstream")
    client.add_toxic(name, "slow_close", {"delay": 100}, toxicity=0.5)
    types = {(t["type"], t["stream"]): t for t in client.toxics(name)}
    assert set(types) == {("slicer", "downstream"), ("timeout", "upstream"), ("slow_close", "downstream")}
    assert types[("slicer", "downstream")]["attributes"] == {"average_size": 64, "size_variation": 16,
                                                             "delay": 10}
    assert types[("slow_close", "downstream")]["toxicity"] == 0.5


def test_reset_heals_disabled_proxies_and_toxics(client, proxy, echo):
    name, addr = proxy
    other = client.create_proxy("other", "127.0.0.1:0", echo)  # port 0: the server picks one
    try:
        client.add_latency(name, 500)
        client.add_timeout("other", 0)
        client.set_enabled(name, False)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(addr, timeout=2)

        client.reset()
        for p in client.proxies().values():
            assert p["enabled"] is True and p["toxics"] == []
        assert roundtrip(addr)[1] < FAST_S
        host, port = other["listen"].rsplit(":", 1)
        assert roundtrip((host, int(port)), b"ok")[0] == b"ok"
    finally:
        client.delete_proxy("other")


def test_bad_requests_raise_with_status_and_message(client, proxy, echo):
    name, _ = proxy
    with pytest.raises(ToxiproxyError, match="proxy already exists") as e:
        client.create_proxy(name, "127.0.0.1:0", echo)
    assert e.value.status == 409 and e.value.method == "POST"
    with pytest.raises(ToxiproxyError, match="proxy not found") as e:
        client.get_proxy("no-such-proxy")
    assert e.value.status == 404
    with pytest.raises(ToxiproxyError, match="invalid toxic type") as e:
        client.add_toxic(name, "no-such-toxic", {})
    assert e.value.status == 400
    with pytest.raises(ToxiproxyError, match="toxic not found") as e:
        client.remove_toxic(name, "no-such-toxic")
    assert e.value.status == 404
    with pytest.raises(ToxiproxyError, match="missing required field") as e:
        client.create_proxy("no-upstream", "127.0.0.1:0", "")
    assert e.value.status == 400
    with pytest.raises(ValueError, match="stream"):
        client.add_toxic(name, "latency", {"latency": 1}, stream="sideways")
    with pytest.raises(ToxiproxyError) as e:
        ToxiproxyClient(f"http://127.0.0.1:{free_port()}", timeout_s=2).version()
    assert e.value.status is None and "unreachable" in str(e.value)


def test_stop_leaves_no_process_behind(tmp_path):
    log = tmp_path / "tp.log"
    with ToxiproxyServer().start(log, seed=42) as srv:
        pid, port = srv.pid, srv.port
        assert srv.running and psutil.Process(pid).name().startswith("toxiproxy")
        assert srv.client.version()
    assert not srv.running and srv.pid is None
    assert processes.group_members(pid) == []
    assert not psutil.pid_exists(pid)
    with pytest.raises(ToxiproxyError):
        ToxiproxyClient(f"http://127.0.0.1:{port}", timeout_s=2).version()
    assert "Starting Toxiproxy" in log.read_text()
    srv.stop()  # idempotent


def test_start_on_a_taken_port_fails_clearly(tmp_path, server):
    with pytest.raises(ToxiproxyStartError, match=rf"port 127\.0\.0\.1:{server.port} is in use"):
        ToxiproxyServer().start(tmp_path / "tp.log", port=server.port)
    with pytest.raises(ToxiproxyStartError, match="call start"):
        with ToxiproxyServer():
            pass
