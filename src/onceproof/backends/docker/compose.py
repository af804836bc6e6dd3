"""The Docker Compose v2 CLI plugin (``docker compose``), built once from its Go module.

Debian 12 packages only Compose v1 (``docker-compose`` 1.29, Python) and no ``docker-compose-plugin``, and
Docker's own apt repository and GitHub releases are not reachable from every machine onceproof runs on,
so the plugin is compiled from ``github.com/docker/compose/v2`` through the Go module proxy.

``go install <module>/cmd@<version>`` refuses that module (its ``go.mod`` has ``exclude`` directives), so
:func:`build_plugin` downloads the module (``go mod download``) and runs ``go build ./cmd`` inside the
downloaded source, with the module and build caches shared with toxiproxy's
(``$ONCEPROOF_CACHE/go``, ``$ONCEPROOF_CACHE/go-build``). The binary goes to
``$ONCEPROOF_CACHE/compose-<version>/docker-compose`` (reused while its ``.complete`` stamp exists) and
:func:`install_plugin` links it as ``~/.docker/cli-plugins/docker-compose``, where the ``docker`` CLI
looks for plugins.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from onceproof.backends.cache import cache_dir
from onceproof.backends.gobuild import built_once, go_env

COMPOSE_MODULE = "github.com/docker/compose/v2"
COMPOSE_VERSION = "v2.40.3"
"""Pinned Compose release: the newest the Go module proxy served (2025-10-30); its ``go.mod`` asks for Go
1.24."""


class ComposeBuildError(RuntimeError):
    """``go`` is missing or the download/build failed (network to the Go module proxy, an old Go)."""


def plugin_dir(version: str = COMPOSE_VERSION) -> Path:
    """``$ONCEPROOF_CACHE/compose-<version>``: where :func:`build_plugin` puts ``docker-compose``."""
    return cache_dir() / f"compose-{version}"


def build_plugin(version: str = COMPOSE_VERSION, *, timeout_s: float = 1800.0) -> Path:
    """Build the Compose plugin once and return the path of the ``docker-compose`` binary.

    The first build downloads the module's dependencies and compiles them: 8.5 minutes at nice 19 on
    the 2-core development machine (``docker/README.md``); later calls return at once.
    Concurrent callers wait on a file lock.

    Raises: ``ComposeBuildError`` naming the fix when ``go`` is not on ``PATH`` or the download or the
    build fails or takes over ``timeout_s`` seconds.
    """
    def build(tmp: Path) -> None:
        go = shutil.which("go")
        if go is None:
            raise ComposeBuildError("`go` is not on PATH: install Go 1.24+ (https://go.dev/dl) to build the "
                                    "Compose v2 plugin, or install Docker's docker-compose-plugin package")
        env = go_env()
        try:
            dl = subprocess.run([go, "mod", "download", "-json", f"{COMPOSE_MODULE}@{version}"], env=env,
                                cwd=tmp, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise ComposeBuildError(f"downloading {COMPOSE_MODULE}@{version} took over {timeout_s:.0f}s; "
                                    "check access to the Go module proxy (GOPROXY)") from e
        try:
            src = Path(json.loads(dl.stdout)["Dir"])
        except (ValueError, KeyError):
            raise ComposeBuildError(f"`go mod download {COMPOSE_MODULE}@{version}` failed (exit {dl.returncode}):\n"
                                    f"{dl.stdout[-2000:]}\n{dl.stderr[-2000:]}\n"
                                    "Check access to the Go module proxy (GOPROXY).") from None
        cmd = [go, "build", "-ldflags", f"-s -w -X {COMPOSE_MODULE}/internal.Version={version}",
               "-o", str(tmp / "docker-compose"), "./cmd"]
        try:
            proc = subprocess.run(cmd, env=env, cwd=src, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise ComposeBuildError(f"`{' '.join(cmd)}` took over {timeout_s:.0f}s") from e
        if proc.returncode != 0 or not (tmp / "docker-compose").exists():
            raise ComposeBuildError(f"building Compose {version} failed (exit {proc.returncode}).\n"
                                    f"Command (in {src}): {' '.join(cmd)}\n{proc.stdout[-2000:]}\n"
                                    f"{proc.stderr[-3000:]}\n"
                                    "Check access to the Go module proxy and that Go is 1.24+.")

    return built_once(plugin_dir(version), "docker-compose", version, build)


def install_plugin(version: str = COMPOSE_VERSION, plugins: Path | None = None) -> Path:
    """Build (once) and link the plugin as ``<plugins>/docker-compose`` (default
    ``$DOCKER_CONFIG/cli-plugins`` or ``~/.docker/cli-plugins``) so that ``docker compose`` works.
    Returns the link's path. An existing file there that is not our link is left alone and
    ``ComposeBuildError`` is raised (remove it, or pass ``plugins``)."""
    binary = build_plugin(version)
    plugins = plugins or Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if link.is_symlink() or not link.exists():
        if link.is_symlink() and os.readlink(link) == str(binary):
            return link
        link.unlink(missing_ok=True)
        link.symlink_to(binary)
        return link
    raise ComposeBuildError(f"{link} exists and is not onceproof's link: remove it to use Compose {version} "
                            f"from {binary}, or keep yours")


COMPOSE_ENV = "ONCEPROOF_COMPOSE"


def compose_command(env: dict[str, str] | None = None) -> list[str] | None:
    """The Compose CLI that runs ``docker-compose.yml`` here, as an argv prefix, or ``None`` when there is
    none (then :func:`install_plugin`, or ``apt-get install docker-compose``).

    In order: ``$ONCEPROOF_COMPOSE`` split on blanks (e.g. ``docker-compose`` to force v1); ``docker
    compose`` (the v2 plugin) when ``docker compose version`` answers; Debian's ``docker-compose`` (v1.29,
    Python; it reads the same file, profiles included) when it is on ``PATH``. ``env``: the environment
    of the probe (``DOCKER_HOST`` …); default ``os.environ``.
    """
    forced = os.environ.get(COMPOSE_ENV, "").split()
    if forced:
        return forced
    docker_cli = shutil.which("docker")
    if docker_cli is not None:
        try:
            p = subprocess.run([docker_cli, "compose", "version"], capture_output=True, text=True, timeout=30,
                               env=env)
            if p.returncode == 0:
                return [docker_cli, "compose"]
        except (OSError, subprocess.TimeoutExpired):
            pass
    v1 = shutil.which("docker-compose")
    return [v1] if v1 is not None else None


if __name__ == "__main__":
    print(install_plugin())
