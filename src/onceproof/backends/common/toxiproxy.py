"""A TCP fault proxy for the harness: Shopify's toxiproxy, built from its Go module, driven over HTTP.

Three pieces:

* :func:`build_server` — ``go install github.com/Shopify/toxiproxy/v2/cmd/server@<TOXIPROXY_VERSION>``
  once into ``cache_dir()/toxiproxy-<version>/toxiproxy-server`` (``cache_dir()`` is
  ``$ONCEPROOF_CACHE`` or ``~/.cache/onceproof``, see :mod:`onceproof.backends.cache`), reused while its
  ``.complete`` stamp exists. The Go module and build caches live in ``cache_dir()/go`` and
  ``cache_dir()/go-build``, never in the repo or the user's own ``GOPATH``.
* :class:`ToxiproxyServer` — runs that binary on ``127.0.0.1`` through :func:`onceproof.backends.common.processes.spawn`
  (own process group, SIGKILLed with the harness).
* :class:`ToxiproxyClient` — a small client for toxiproxy's HTTP API.

Why our own client and not PyPI's ``toxiproxy-python`` (0.1.1, the latest release, from January
2019; Python 2.7/3.4–3.5 classifiers): it keeps the server's host and port in *class* attributes (one server per Python
process), needs the Python-2 compatibility package ``future`` and ``requests``, sets no request
timeouts, turns only 400/404/409 into exceptions (a 500 passes silently) and drops the HTTP status.
The API is a dozen JSON calls, so this module speaks it with the standard library's ``urllib``
(no new dependency; ``requests`` is not in the venv either), with proxies disabled and a timeout on
every call.

API facts (endpoints, status codes, toxic types and their attributes and units) are from the
toxiproxy README, "HTTP API" and "Toxics" sections, https://github.com/Shopify/toxiproxy#http-api ,
for the pinned version. Summary:

=========================================  ====================================================
``GET /version``                           server version
``GET /proxies``                           ``{name: proxy}``
``POST /proxies``                          create ``{name, listen, upstream, enabled}``; 201,
                                           409 when the name exists
``GET /proxies/{proxy}``                   one proxy with its toxics; 404 when unknown
``PATCH /proxies/{proxy}``                 update ``listen``/``upstream``/``enabled`` (POST
                                           also works but is deprecated since 2.6)
``DELETE /proxies/{proxy}``                delete; 204
``GET /proxies/{proxy}/toxics``            the proxy's toxics
``POST /proxies/{proxy}/toxics``           add ``{name, type, stream, toxicity, attributes}``
``PATCH /proxies/{proxy}/toxics/{toxic}``  update a toxic's attributes/toxicity
``DELETE /proxies/{proxy}/toxics/{toxic}`` remove; 204
``POST /reset``                            re-enable every proxy and remove every toxic; 204
=========================================  ====================================================

A proxy's "downstream" is the server → client direction, "upstream" client → server.
Disabling a proxy closes its listener and every open connection through it (new connections are
refused) — a clean network cut between the client side and the upstream.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from onceproof.backends.cache import cache_dir
from onceproof.backends.common import processes
from onceproof.backends.gobuild import built_once, go_env

TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2"
TOXIPROXY_VERSION = "v2.12.0"
"""Pinned toxiproxy release: the newest v2 tag the Go module proxy serves (2025-03-18). Its
``go.mod`` asks for Go 1.23."""
MIN_GO = (1, 23)
DEFAULT_API_PORT = 8474
"""toxiproxy's own default API port."""

STREAMS = ("downstream", "upstream")
TOXIC_TYPES = ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data")


class ToxiproxyBuildError(RuntimeError):
    """``go`` is missing or too old, or ``go install`` failed (network, module proxy)."""


class ToxiproxyStartError(RuntimeError):
    """The server did not come up (port taken, binary crashed, no answer in time)."""


class ToxiproxyError(RuntimeError):
    """The toxiproxy API refused a request, or did not answer.

    Attributes:
        method, path: the request (``path`` relative to the server URL).
        status: the HTTP status, or ``None`` when the server could not be reached.
        body: the response body as text (toxiproxy answers ``{"error": ..., "status": ...}``), or the
            connection error.
    """

    def __init__(self, method: str, path: str, status: int | None, body: str):
        self.method, self.path, self.status, self.body = method, path, status, body
        what = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"toxiproxy {method} {path}: {what}: {body.strip()}")


# ----------------------------------------------------------------------------------------------- build

def server_dir(version: str = TOXIPROXY_VERSION) -> Path:
    """``cache_dir()/toxiproxy-<version>``: where :func:`build_server` puts the binary."""
    return cache_dir() / f"toxiproxy-{version}"


def _go_version(go: str) -> tuple[int, int]:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, GOTOOLCHAIN="local"))
    m = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    if out.returncode != 0 or not m:
        raise ToxiproxyBuildError(f"`{go} env GOVERSION` failed ({out.stdout.strip()} {out.stderr.strip()}); "
                                  f"install Go {MIN_GO[0]}.{MIN_GO[1]}+ (https://go.dev/dl)")
    return int(m.group(1)), int(m.group(2))


def build_server(version: str = TOXIPROXY_VERSION, *, timeout_s: float = 900.0) -> Path:
    """Build toxiproxy's server once and return the path of the ``toxiproxy-server`` binary.

    Runs ``go install github.com/Shopify/toxiproxy/v2/cmd/server@<version>`` with ``GOBIN`` in a
    ``.partial`` directory next to :func:`server_dir`, renames Go's ``server`` to
    ``toxiproxy-server``, then moves the directory into place and writes ``.complete``. A directory
    that has the stamp is reused without running Go. Concurrent callers (several processes) wait on a
    file lock. The build's version string (``GET /version``) is set to ``version`` through
    ``-ldflags -X``. ``GOTOOLCHAIN`` defaults to ``local``; ``GOPROXY`` and friends are inherited.

    The first build downloads the module and its dependencies through the Go module proxy and
    compiles them: about a minute; later calls return at once.

    Raises: ``ToxiproxyBuildError`` naming the fix when ``go`` is missing or older than 1.23, or when
    the build fails (typically no network access to the Go module proxy).
    """
    def build(tmp: Path) -> None:
        go = shutil.which("go")
        if go is None:
            raise ToxiproxyBuildError(
                f"`go` is not on PATH: install Go {MIN_GO[0]}.{MIN_GO[1]}+ (https://go.dev/dl, or "
                "`apt-get install golang-go` where it is new enough) to build toxiproxy")
        have = _go_version(go)
        if have < MIN_GO and os.environ.get("GOTOOLCHAIN", "local") == "local":
            raise ToxiproxyBuildError(
                f"toxiproxy {version} needs Go {MIN_GO[0]}.{MIN_GO[1]}+, `{go}` is {have[0]}.{have[1]}: "
                f"install a newer Go, or set GOTOOLCHAIN=auto to let go fetch one")
        cmd = [go, "install", f"-ldflags=-s -w -X {TOXIPROXY_MODULE}.Version={version.lstrip('v')}",
               f"{TOXIPROXY_MODULE}/cmd/server@{version}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=go_env(gobin=tmp), cwd=tmp,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise ToxiproxyBuildError(f"`{' '.join(cmd)}` took over {timeout_s:.0f}s; "
                                      "check network access to the Go module proxy (GOPROXY)") from e
        built = tmp / "server"
        if proc.returncode != 0 or not built.exists():
            raise ToxiproxyBuildError(
                f"building toxiproxy {version} failed (exit {proc.returncode}).\n"
                f"Command: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}\n"
                f"Check network access to the Go module proxy (GOPROXY) and that Go is "
                f"{MIN_GO[0]}.{MIN_GO[1]}+.")
        built.rename(tmp / "toxiproxy-server")

    return built_once(server_dir(version), "toxiproxy-server", version, build)


# ---------------------------------------------------------------------------------------------- server

def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _listens_on(pid: int, port: int) -> bool:
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns)


class ToxiproxyServer:
    """A ``toxiproxy-server`` process listening on ``127.0.0.1``.

    Usage::

        with ToxiproxyServer().start(run_dir / "toxiproxy.log") as srv:
            srv.client.create_proxy("broker1", "127.0.0.1:19092", "127.0.0.1:9092")
     The process is started by :func:`onceproof.backends.common.processes.spawn` with ``tie_to_parent=True``:
    it is in its own process group and is SIGKILLed when the harness dies (``PR_SET_PDEATHSIG``; that signal
    follows the *thread* that forked, see :mod:`onceproof.backends.common.processes` for which thread that
    is).

    Args:
        binary: the server binary; ``None`` builds (or reuses) the pinned one with :func:`build_server`.
    """

    def __init__(self, binary: Path | None = None):
        self._binary = binary
        self._proc: subprocess.Popen | None = None
        self._port: int | None = None
        self.log_path: Path | None = None

    def start(self, log_path: Path, port: int | None = None, *, seed: int | None = None,
              timeout_s: float = 20.0) -> ToxiproxyServer:
        """Start the server with ``-host 127.0.0.1 -port <port>`` and wait until ``GET /version`` answers.

        Args:
            log_path: file receiving the server's output (JSON log lines).
            port: API port; ``None`` picks a free one (toxiproxy's own default is 8474,
                :data:`DEFAULT_API_PORT`).
            seed: ``-seed`` for the random choices of toxics with ``toxicity`` < 1 and of jitter;
                ``None`` keeps toxiproxy's time-based seed.
            timeout_s: how long to wait for the API, in seconds.

        Returns: ``self``.

        Raises: ``ToxiproxyStartError`` when already running, when ``port`` is taken, or when the server
        exits or does not answer in time (the message names the log); ``ToxiproxyBuildError`` from
        :func:`build_server`.
        """
        if self._proc is not None:
            raise ToxiproxyStartError(f"toxiproxy already running (pid {self._proc.pid}, {self.url})")
        binary = self._binary or build_server()
        if port is not None and not _port_free(port):
            raise ToxiproxyStartError(f"port 127.0.0.1:{port} is in use; pick another or pass port=None")
        self.log_path = Path(log_path)
        attempts = 1 if port is not None else 3  # a picked port can be taken before the server binds it
        err = ""
        for _ in range(attempts):
            p = port if port is not None else free_port()
            argv = [str(binary), "-host", "127.0.0.1", "-port", str(p)]
            if seed is not None:
                argv += ["-seed", str(seed)]
            proc = processes.spawn(argv, log_path=self.log_path, tie_to_parent=True)
            self._proc, self._port = proc, p
            err = self._wait_ready(timeout_s)
            if not err:
                return self
            self.stop()
        raise ToxiproxyStartError(f"toxiproxy did not start: {err}; see {self.log_path}")

    def _wait_ready(self, timeout_s: float) -> str:
        """'' when our process listens on the port and answers ``/version``; else why not."""
        assert self._proc is not None and self._port is not None
        deadline = time.monotonic() + timeout_s
        client = ToxiproxyClient(self.url, timeout_s=2.0)
        last = "no answer"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return f"exited with code {self._proc.returncode}"
            # toxiproxy logs a failed listen() and keeps running, so check that the port is ours before
            # trusting an answer (which could come from another server on the same port).
            if _listens_on(self._proc.pid, self._port):
                try:
                    client.version()
                    return ""
                except ToxiproxyError as e:
                    last = str(e)
            else:
                last = f"not listening on 127.0.0.1:{self._port}"
            time.sleep(0.05)
        return f"{last} after {timeout_s:.0f}s"

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``grace_s`` seconds, and reap it.

        Proxies and toxics die with it (they live only in the server's memory). Safe to call twice.
        """
        proc, self._proc = self._proc, None
        if proc is None:
            return
        processes.signal_group(proc.pid, "SIGCONT")  # a paused server must be able to act on SIGTERM
        processes.signal_group(proc.pid, "SIGTERM")
        try:
            proc.wait(timeout=grace_s)  # reaps the child, so it is not left as a zombie in its group
        except subprocess.TimeoutExpired:
            pass
        processes.kill_group(proc.pid)  # whatever is left (toxiproxy forks nothing)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        """SIGKILL the server at once (a crash, as a fault)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            processes.kill_group(proc.pid)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    @property
    def running(self) -> bool:
        """True while the server process is alive; for an :meth:`attached` server, while its API answers."""
        if self._proc is None and self._port is not None:
            try:
                self.client.version()
                return True
            except ToxiproxyError:
                return False
        return self._proc is not None and self._proc.poll() is None

    @classmethod
    def attached(cls, port: int) -> ToxiproxyServer:
        """A handle on a server another process started and owns (a warm cluster's, ``harness/warm.py``),
        its API on ``127.0.0.1:port``: its client works, :meth:`stop` and :meth:`kill` leave it running."""
        srv = cls()
        srv._port = port
        return srv

    @property
    def pid(self) -> int | None:
        """The server's pid (also its process-group id), ``None`` when stopped."""
        return self._proc.pid if self._proc is not None else None

    @property
    def port(self) -> int:
        """The API port. Raises ``ToxiproxyStartError`` before :meth:`start`."""
        if self._port is None:
            raise ToxiproxyStartError("toxiproxy server not started")
        return self._port

    @property
    def url(self) -> str:
        """The API base URL, ``http://127.0.0.1:<port>``. Raises ``ToxiproxyStartError`` before
        :meth:`start`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> ToxiproxyClient:
        """A :class:`ToxiproxyClient` for this server."""
        return ToxiproxyClient(self.url)

    def __enter__(self) -> ToxiproxyServer:
        if self._proc is None:
            raise ToxiproxyStartError("call start(log_path) before entering: "
                                      "`with ToxiproxyServer().start(log) as srv:`")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------- client

class ToxiproxyClient:
    """Client for toxiproxy's HTTP API (facts from the toxiproxy README, "HTTP API" and "Toxics").

    Proxies and toxics are returned as the JSON the server sends: a proxy is
    ``{"name", "listen", "upstream", "enabled", "toxics": [...]}``; a toxic is
    ``{"name", "type", "stream", "toxicity", "attributes"}``.

    Every call raises :class:`ToxiproxyError` (with the HTTP status and body) when the server refuses
    it, or with ``status=None`` when the server cannot be reached.

    Args:
        url: base URL such as ``http://127.0.0.1:8474`` (:attr:`ToxiproxyServer.url`).
        timeout_s: socket timeout of each request, in seconds.
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        # No proxy handler: an http_proxy in the environment must not capture calls to 127.0.0.1.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- transport

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Content-Type": "application/json", "Accept": "application/json",
            "User-Agent": "onceproof-toxiproxy-client"})  # toxiproxy refuses browser user agents
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                raw = resp.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as e:
            try:
                text = e.read().decode("utf-8", errors="replace")
            except OSError:
                text = ""
            raise ToxiproxyError(method, path, e.code, text or e.reason) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ToxiproxyError(method, path, None, f"{self.url} unreachable: {reason}") from None
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    @staticmethod
    def _q(name: str) -> str:
        return urllib.parse.quote(name, safe="")

    # -- server

    def version(self) -> str:
        """The server's version string (``GET /version``; JSON ``{"version": ...}`` or plain text,
        depending on the toxiproxy release)."""
        v = self._request("GET", "/version")
        return str(v.get("version", v)) if isinstance(v, dict) else str(v).strip()

    def reset(self) -> None:
        """Heal everything: re-enable every proxy and remove every toxic (``POST /reset``).

        Proxies themselves are kept; use :meth:`delete_proxy` to remove them.
        """
        self._request("POST", "/reset")

    # -- proxies

    def proxies(self) -> dict[str, dict]:
        """All proxies, by name (``GET /proxies``)."""
        return self._request("GET", "/proxies") or {}

    def get_proxy(self, name: str) -> dict:
        """One proxy with its toxics (``GET /proxies/{name}``); 404 → ``ToxiproxyError``."""
        return self._request("GET", f"/proxies/{self._q(name)}")

    def create_proxy(self, name: str, listen: str, upstream: str, *, enabled: bool = True) -> dict:
        """Create proxy ``name`` forwarding ``listen`` → ``upstream`` (``POST /proxies``).

        Args:
            name: unique proxy name; 409 → ``ToxiproxyError`` when it exists.
            listen: ``"127.0.0.1:<port>"`` the proxy listens on (port 0 lets the server pick; the
                returned ``listen`` has the real port).
            upstream: ``"host:port"`` it connects to for each accepted connection.
            enabled: start listening at once.

        Returns: the proxy as the server reports it.
        """
        return self._request("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                                  "enabled": enabled})

    def delete_proxy(self, name: str) -> None:
        """Delete proxy ``name``, closing its listener and connections (``DELETE /proxies/{name}``)."""
        self._request("DELETE", f"/proxies/{self._q(name)}")

    def set_enabled(self, name: str, enabled: bool) -> dict:
        """Cut (``False``) or restore (``True``) the path through proxy ``name``
        (``PATCH /proxies/{name}`` with ``{"enabled": ...}``).

        Disabling closes the proxy's listener and every open connection through it, so clients see
        their connections closed and new ones refused; enabling listens again on the same address.
        Toxics are kept either way.
        """
        return self._request("PATCH", f"/proxies/{self._q(name)}", {"enabled": bool(enabled)})

    # -- toxics

    def toxics(self, proxy: str) -> list[dict]:
        """The toxics of ``proxy`` (``GET /proxies/{proxy}/toxics``)."""
        return self._request("GET", f"/proxies/{self._q(proxy)}/toxics") or []

    def add_toxic(self, proxy: str, type: str, attributes: dict[str, Any] | None = None, *,
                  stream: str = "downstream", toxicity: float = 1.0, name: str | None = None) -> dict:
        """Add a toxic to ``proxy`` (``POST /proxies/{proxy}/toxics``).

        Args:
            proxy: proxy name.
            type: one of :data:`TOXIC_TYPES`; attributes and units (toxiproxy README, "Toxics"):

                * ``latency``: ``latency`` ms added to each chunk of data, ± ``jitter`` ms;
                * ``bandwidth``: ``rate`` KB/s (1 KB = 1000 bytes in toxiproxy's code);
                * ``slow_close``: ``delay`` ms before the TCP close goes through;
                * ``timeout``: stop all data and close the connection after ``timeout`` ms
                  (0: never close; data is held until the toxic is removed);
                * ``reset_peer``: reset the connection (TCP RST, ``ECONNRESET``) after ``timeout`` ms;
                * ``slicer``: cut data into packets of ``average_size`` bytes ± ``size_variation``
                  bytes, ``delay`` µs apart;
                * ``limit_data``: close the connection once ``bytes`` bytes have passed.
            attributes: the type's attributes (missing ones default to 0 on the server).
            stream: ``"downstream"`` (upstream server → client) or ``"upstream"`` (client → server).
            toxicity: probability in [0, 1] that the toxic applies to a given connection.
            name: toxic name, unique per proxy; the server defaults it to ``<type>_<stream>``.

        Returns: the toxic as the server reports it.

        Raises: ``ToxiproxyError`` (e.g. 400 for an unknown type or stream, 404 for an unknown proxy,
        409 for a duplicate name); ``ValueError`` for a ``stream`` or ``toxicity`` out of range.
        """
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {STREAMS}, not {stream!r}")
        if not 0.0 <= toxicity <= 1.0:
            raise ValueError(f"toxicity must be in [0, 1], not {toxicity}")
        body: dict[str, Any] = {"type": type, "stream": stream, "toxicity": toxicity,
                                "attributes": dict(attributes or {})}
        if name is not None:
            body["name"] = name
        return self._request("POST", f"/proxies/{self._q(proxy)}/toxics", body)

    def update_toxic(self, proxy: str, name: str, attributes: dict[str, Any] | None = None, *,
                     toxicity: float | None = None) -> dict:
        """Change a toxic's attributes and/or toxicity in place (``PATCH /proxies/{proxy}/toxics/{name}``)."""
        body: dict[str, Any] = {}
        if attributes is not None:
            body["attributes"] = dict(attributes)
        if toxicity is not None:
            body["toxicity"] = toxicity
        return self._request("PATCH", f"/proxies/{self._q(proxy)}/toxics/{self._q(name)}", body)

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove toxic ``name`` from ``proxy`` (``DELETE /proxies/{proxy}/toxics/{name}``)."""
        self._request("DELETE", f"/proxies/{self._q(proxy)}/toxics/{self._q(name)}")

    # -- typed shorthands for add_toxic (units in the names)

    def add_latency(self, proxy: str, latency_ms: int, jitter_ms: int = 0, **kw: Any) -> dict:
        """``latency`` toxic: delay data by ``latency_ms`` ± ``jitter_ms`` milliseconds."""
        return self.add_toxic(proxy, "latency", {"latency": int(latency_ms), "jitter": int(jitter_ms)}, **kw)

    def add_bandwidth(self, proxy: str, rate_kb_s: int, **kw: Any) -> dict:
        """``bandwidth`` toxic: limit throughput to ``rate_kb_s`` KB/s (1 KB = 1000 bytes)."""
        return self.add_toxic(proxy, "bandwidth", {"rate": int(rate_kb_s)}, **kw)

    def add_slicer(self, proxy: str, average_size: int, size_variation: int = 0, delay_us: int = 0,
                   **kw: Any) -> dict:
        """``slicer`` toxic: packets of ``average_size`` ± ``size_variation`` bytes, ``delay_us`` µs apart."""
        return self.add_toxic(proxy, "slicer", {"average_size": int(average_size),
                                                "size_variation": int(size_variation),
                                                "delay": int(delay_us)}, **kw)

    def add_timeout(self, proxy: str, timeout_ms: int, **kw: Any) -> dict:
        """``timeout`` toxic: black-hole data, close after ``timeout_ms`` ms (0: hold until removed)."""
        return self.add_toxic(proxy, "timeout", {"timeout": int(timeout_ms)}, **kw)

    def add_reset_peer(self, proxy: str, timeout_ms: int = 0, **kw: Any) -> dict:
        """``reset_peer`` toxic: TCP RST on connections after ``timeout_ms`` ms (0: at once)."""
        return self.add_toxic(proxy, "reset_peer", {"timeout": int(timeout_ms)}, **kw)

    def add_limit_data(self, proxy: str, nbytes: int, **kw: Any) -> dict:
        """``limit_data`` toxic: close each connection once ``nbytes`` bytes have passed."""
        return self.add_toxic(proxy, "limit_data", {"bytes": int(nbytes)}, **kw)
