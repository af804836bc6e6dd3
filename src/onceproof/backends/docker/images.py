"""Locally built images for the Docker backend, cached by a tag that hashes everything they are built from.

No image registry is needed. Six images, each ``onceproof/<name>:<version>-<hash>`` (content-addressed)
plus a moving alias ``onceproof/<name>:<version>`` pointing at the newest build:

=============  =================================================================================  ==========
image          what                                                                               from
=============  =================================================================================  ==========
``base``       Debian 12 ``--variant=minbase`` from ``debootstrap`` piped (tar) into              (nothing)
               ``docker import``, with apt set to install no recommends and no docs
``jre``        ``openjdk-17-jre-headless``; the layer ``kafka`` and ``spark`` share               base
``kafka``      the broker jars the harness resolves (``onceproof.backends.common.jars.kafka_classpath``), the       jre
               official image's layout and env convention (``docker/kafka/Dockerfile``); one image
               per Kafka release (``build(kafka_version=...)``)
``spark``      Python 3.11 + a venv with the driver's pinned PySpark, py4j, confluent-kafka and   jre
               psycopg (wheels from pip's cache) + Spark's Kafka connector jars
``toxiproxy``  the ``toxiproxy-server`` the harness builds (``common.toxiproxy.build_server``)        base
``postgres``   Debian's ``postgresql-15`` server and its entrypoint (``docker/postgres/run``)      base
=============  =================================================================================  ==========

The hash (sha256, first 12 hex digits in the tag) covers the Dockerfile, every file of the build context
(jars and binaries by content, the wheels by their pinned versions), the build arguments — among them
the ``BASE`` image's tag, itself content-addressed, so a changed base rebuilds what is built on it — and
:data:`RECIPE`. When the tag exists, building is a no-op (a second call costs milliseconds plus hashing
~60 MB of jars and binaries). Builds use the engine's legacy builder through the docker SDK, with
``--network host`` (apt reaches the Debian mirror through the host), ``--rm --force-rm``; each build's
output goes to ``$ONCEPROOF_CACHE/docker/builds/<name>.log``.

Official images instead of local ones: ``kafka_base="apache/kafka:4.1.1"`` (``--kafka-base``) and
``spark_base="apache/spark:<tag>"`` (``--spark-base``) become the Dockerfiles' ``BASE``; the kafka
context then carries no jars and the official scripts are kept, the spark image still installs the
pinned PySpark (driver and cluster must run the same Spark).

Command line (the Makefile's ``docker-images`` target)::

    python -m onceproof.backends.docker.images build [base jre kafka spark toxiproxy postgres node] \
        [--kafka-base IMG] [--spark-base IMG]
    python -m onceproof.backends.docker.images list
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import docker
from onceproof.backends.common import jars, toxiproxy
from onceproof.backends.docker.engine import DockerEngine, EngineError, engine_dir
from onceproof.checkout import repository

DOCKER_DIR = (repository() or Path("/nonexistent-onceproof-checkout")) / "docker"
"""The image recipes: only a git checkout has them (``docker/``); :func:`build` refuses without one."""
NAMESPACE = "onceproof"
RECIPE = "2"
"""Bumped when this module changes how an image is assembled, so that every tag changes with it."""

SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("ONCEPROOF_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("ONCEPROOF_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
JAVA_MAJOR = "17"
CONTEXT_MTIME = 946684800  # 2000-01-01: fixed mtime of every build-context entry (reproducible tars)
NAMES = ("base", "jre", "kafka", "spark", "toxiproxy", "postgres", "node")
POSTGRES_MAJOR = "15"
"""The PostgreSQL server the postgres image installs (Debian 12's ``postgresql-15``)."""
SPARK_PYTHON = ("pyspark", "py4j", "confluent-kafka", "psycopg", "psycopg-binary", "typing_extensions")
"""The Python distributions the spark image's venv holds: the driver's Spark and Kafka client, and what
the bundled PostgreSQL sinks write with (psycopg 3 and its one dependency below Python 3.13)."""
OFFICIAL_RUN_AS = {"kafka": "appuser", "spark": "spark"}
"""The user the official apache/kafka and apache/spark images run as (restored after the root steps)."""


class ImageBuildError(RuntimeError):
    """An image could not be built: a missing tool (``debootstrap``, ``tar``), no network to the Debian
    mirror or PyPI, an input the harness resolves failing (Maven, Go), or a failed build step. The
    message names the fix and, for a Dockerfile build, the log file holding the whole output."""


@dataclass
class Built:
    """One image after :func:`build`.

    Attributes:
        name: one of :data:`NAMES`.
        tag: the content-addressed tag, ``onceproof/<name>:<version>-<hash12>``.
        alias: the moving tag ``onceproof/<name>:<version>`` (it points at ``tag`` after the call).
        image_id: ``sha256:...``.
        built: False when the tag existed and nothing was built.
        seconds: wall time of the call (gathering inputs, hashing, building), seconds.
        size_bytes: the image's size as the engine reports it (all layers), bytes.
    """

    name: str
    tag: str
    alias: str
    image_id: str
    built: bool
    seconds: float
    size_bytes: int


@dataclass
class _Entry:
    """A build-context entry: ``arcname`` in the tar, from a file (``path``) or ``data``."""

    arcname: str
    path: Path | None = None
    data: bytes | None = None
    mode: int = 0o644
    hash_by: str | None = None  # hash this text instead of the file's content (wheels: their pinned version)

    def digest(self, cache: dict) -> str:
        if self.hash_by is not None:
            return "by:" + self.hash_by
        if self.data is not None:
            return hashlib.sha256(self.data).hexdigest()
        if self.path is None:
            return "dir"
        return _file_sha256(self.path, cache)


@dataclass
class _Recipe:
    name: str
    version: str
    dockerfile: Path
    entries: list[_Entry]
    buildargs: dict[str, str]
    prepare: Callable[[], list[_Entry]] | None = None  # more entries, gathered only when building
    labels: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- hashing

def _sha_cache_path() -> Path:
    return engine_dir() / "sha256-cache.json"


def _file_sha256(path: Path, cache: dict) -> str:
    """sha256 of ``path``, remembered by (path, size, mtime_ns, inode) in ``cache``."""
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
    if key not in cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        cache[key] = h.hexdigest()
    return cache[key]


def _load_sha_cache() -> dict:
    try:
        return json.loads(_sha_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _save_sha_cache(cache: dict) -> None:
    p = _sha_cache_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(cache))
    os.replace(tmp, p)


def recipe_hash(dockerfile_text: str, entries: Iterable[_Entry], buildargs: dict[str, str],
                cache: dict | None = None) -> str:
    """sha256 (hex) over :data:`RECIPE`, the Dockerfile's text, each context entry's name, mode and
    content digest (sorted by name) and the build arguments (sorted)."""
    cache = {} if cache is None else cache
    h = hashlib.sha256()
    h.update(f"recipe {RECIPE}\n".encode())
    h.update(hashlib.sha256(dockerfile_text.encode()).hexdigest().encode() + b"\n")
    for e in sorted(entries, key=lambda e: e.arcname):
        h.update(f"{e.arcname}\0{e.mode:o}\0{e.digest(cache)}\n".encode())
    for k in sorted(buildargs):
        h.update(f"arg {k}={buildargs[k]}\n".encode())
    return h.hexdigest()


def _tree(src: Path, prefix: str) -> list[_Entry]:
    """Every file under ``src`` as entries under ``prefix/`` (modes kept: scripts stay executable)."""
    out = []
    for p in sorted(src.rglob("*")):
        if p.is_file():
            out.append(_Entry(f"{prefix}/{p.relative_to(src).as_posix()}", path=p,
                              mode=0o755 if os.access(p, os.X_OK) else 0o644))
    return out


def _write_context(path: Path, dockerfile: Path, entries: list[_Entry]) -> None:
    """An uncompressed tar of ``Dockerfile`` + ``entries``, owner root, mtime :data:`CONTEXT_MTIME`."""
    dirs: set[str] = set()
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        def add_dir(name: str) -> None:
            parts = name.split("/")
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d and d not in dirs:
                    dirs.add(d)
                    ti = tarfile.TarInfo(d)
                    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, CONTEXT_MTIME
                    tar.addfile(ti)

        def add(name: str, data: bytes | None, src: Path | None, mode: int) -> None:
            if "/" in name:
                add_dir(name.rsplit("/", 1)[0])
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime = mode, CONTEXT_MTIME
            if src is not None:
                ti.size = src.stat().st_size
                with open(src, "rb") as f:
                    tar.addfile(ti, f)
            else:
                ti.size = len(data or b"")
                tar.addfile(ti, io.BytesIO(data or b""))

        add("Dockerfile", dockerfile.read_bytes(), None, 0o644)
        for e in sorted(entries, key=lambda e: e.arcname):
            if e.path is None and e.data is None:
                add_dir(e.arcname.rstrip("/"))
            else:
                add(e.arcname, e.data, e.path, e.mode)


# -------------------------------------------------------------------------------------------- helpers

def _exists(client: docker.DockerClient, ref: str):
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def _alias(image, repo: str, alias_tag: str) -> None:
    if f"{repo}:{alias_tag}" not in (image.tags or []):
        image.tag(repo, alias_tag)


def _drop_older(client: docker.DockerClient, repo: str, version: str, keep: str) -> None:
    """Remove the other ``<repo>:<version>-<hash>`` tags (earlier builds) so that disk use stays at one
    image per name; an image a container still uses stays (the engine refuses, which is ignored)."""
    for img in client.images.list(name=repo):
        for t in img.tags:
            rest = t.split(":", 1)[1]
            if rest.startswith(version + "-") and rest != keep \
                    and re.fullmatch(r"[0-9a-f]{12}", rest[len(version) + 1:]):
                try:
                    client.images.remove(t)
                except docker.errors.APIError:
                    pass


def _say(msg: str) -> None:
    print(msg, flush=True)


def builds_dir() -> Path:
    """``$ONCEPROOF_CACHE/docker/builds``: one ``<name>.log`` per image (the last build's output)."""
    return engine_dir() / "builds"


def _heavy_prefix() -> list[str]:
    """``nice -n 19 ionice -c3`` for the heavy host-side steps (debootstrap, tar), so builds never take
    CPU or disk from a test or soak on the same machine."""
    out = ["nice", "-n", "19"]
    if shutil.which("ionice"):
        out += ["ionice", "-c3"]
    return out


# ---------------------------------------------------------------------------------------------- base

def _arch() -> str:
    try:
        return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def _sources_list() -> bytes:
    return (f"deb {DEBIAN_MIRROR} {SUITE} main\n"
            f"deb {DEBIAN_MIRROR} {SUITE}-updates main\n"
            f"deb {SECURITY_MIRROR} {SUITE}-security main\n").encode()


def _strip_docs(root: Path) -> None:
    """Remove what ``docker/base/rootfs/etc/dpkg/dpkg.cfg.d/90onceproof-nodoc`` keeps out of later installs:
    documentation (but not licences), man and info pages, translations."""
    share = root / "usr" / "share"
    for d in (share / "doc").glob("*"):
        if d.is_dir() and not d.is_symlink():
            for f in d.iterdir():
                if f.name != "copyright":
                    shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()
    for sub in ("man", "info"):
        for f in (share / sub).glob("*"):
            shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()
    for f in (share / "locale").glob("*"):
        if f.name != "locale.alias":
            shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()


def build_base(client: docker.DockerClient, *, force: bool = False, log: Callable[[str], None] = _say) -> Built:
    """The base image: ``debootstrap --variant=minbase <SUITE>`` from :data:`DEBIAN_MIRROR` into a
    scratch directory, apt configured (``docker/base/rootfs`` copied over it, ``sources.list`` with
    ``-updates`` and ``-security``, caches emptied), then ``tar`` piped into ``docker import``.
    Downloaded packages are kept in ``$ONCEPROOF_CACHE/docker/debootstrap-cache`` for a rebuild.

    Takes a minute or two on a fresh machine (about 40 MB of packages), nothing when the tag exists.

    Raises: ``ImageBuildError`` naming the fix: not root, ``debootstrap`` missing (``apt-get install
    debootstrap``), debootstrap failing (mirror unreachable: set ``ONCEPROOF_DEBIAN_MIRROR``), import failing.
    """
    t0 = time.monotonic()
    arch = _arch()
    tweaks = _tree(DOCKER_DIR / "base" / "rootfs", "rootfs")
    recipe_text = f"debootstrap --variant=minbase --arch={arch} {SUITE} {DEBIAN_MIRROR}\n"
    entries = tweaks + [_Entry("rootfs/etc/apt/sources.list", data=_sources_list())]
    h = recipe_hash(recipe_text, entries, {})
    repo, version = f"{NAMESPACE}/base", SUITE
    tag = f"{version}-{h[:12]}"
    img = None if force else _exists(client, f"{repo}:{tag}")
    if img is not None:
        _alias(img, repo, version)
        return Built("base", f"{repo}:{tag}", f"{repo}:{version}", img.id, False, time.monotonic() - t0,
                     img.attrs.get("Size", 0))
    if os.geteuid() != 0:
        raise ImageBuildError("building the base image runs debootstrap, which needs root: run as root "
                              "(`sudo make docker-images`)")
    if shutil.which("debootstrap") is None and not os.path.exists("/usr/sbin/debootstrap"):
        raise ImageBuildError("`debootstrap` is not installed: `apt-get install debootstrap` "
                              "(`make docker-images` does it)")
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    work = engine_dir() / "tmp"
    work.mkdir(parents=True, exist_ok=True)
    debcache = engine_dir() / "debootstrap-cache"
    debcache.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=work))
    blog = builds_dir() / "base.log"
    blog.parent.mkdir(parents=True, exist_ok=True)
    try:
        log(f"base: debootstrap {SUITE} ({arch}) from {DEBIAN_MIRROR} ...")
        cmd = _heavy_prefix() + [debootstrap, "--variant=minbase", f"--arch={arch}", f"--cache-dir={debcache}",
                                 SUITE, str(root), DEBIAN_MIRROR]
        with open(blog, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            raise ImageBuildError(f"debootstrap failed (exit {rc}); see {blog} "
                                  f"(and {root}/debootstrap/debootstrap.log)."
                                  f" Check access to {DEBIAN_MIRROR} or set ONCEPROOF_DEBIAN_MIRROR to a mirror")
        for e in tweaks:
            dest = root / e.arcname[len("rootfs/"):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(e.path, dest)
            dest.chmod(e.mode)
        (root / "etc/apt/sources.list").write_bytes(_sources_list())
        for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"):
            for p in root.glob(pattern):
                if p.is_file():
                    p.unlink()
        for p in ("etc/hostname", "etc/resolv.conf"):  # the engine provides these per container
            (root / p).unlink(missing_ok=True)
        _strip_docs(root)  # what debootstrap unpacked before the dpkg excludes were in place
        log(f"base: debootstrap done in {time.monotonic() - t0:.0f}s; docker import ...")
        tar = subprocess.Popen(_heavy_prefix() + ["tar", "--numeric-owner", "--xattrs", "-C", str(root),
                                                  "-cf", "-", "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            client.api.import_image(src=tar.stdout, repository=repo, tag=tag, stream_src=True, changes=[
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV LANG=C.UTF-8", 'CMD ["bash"]'])
        finally:
            _, err = tar.communicate()
        if tar.returncode != 0:
            raise ImageBuildError(f"tar of the base rootfs failed: {err.decode(errors='replace')[-1000:]}")
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)
    img = _exists(client, f"{repo}:{tag}")
    if img is None:
        raise ImageBuildError(f"docker import did not produce {repo}:{tag}; see {blog}")
    _alias(img, repo, version)
    _drop_older(client, repo, version, tag)
    secs = time.monotonic() - t0
    log(f"base: {repo}:{tag} in {secs:.0f}s")
    return Built("base", f"{repo}:{tag}", f"{repo}:{version}", img.id, True, secs, img.attrs.get("Size", 0))


# --------------------------------------------------------------------------------- Dockerfile images

def _run_build(client: docker.DockerClient, r: _Recipe, repo: str, tag: str, h: str, entries: list[_Entry],
               log: Callable[[str], None]) -> None:
    blog = builds_dir() / f"{r.name}.log"
    blog.parent.mkdir(parents=True, exist_ok=True)
    work = engine_dir() / "tmp"
    work.mkdir(parents=True, exist_ok=True)
    fd, ctx = tempfile.mkstemp(prefix=f"context-{r.name}-", suffix=".tar", dir=work)
    os.close(fd)
    ctx_path = Path(ctx)
    labels = {"org.onceproof.image": r.name, "org.onceproof.version": r.version, "org.onceproof.hash": h,
              **r.labels}
    try:
        _write_context(ctx_path, r.dockerfile, entries)
        log(f"{r.name}: building {repo}:{tag} (context {ctx_path.stat().st_size / 1e6:.0f} MB) ...")
        last: list[str] = []
        with open(ctx_path, "rb") as f, open(blog, "w") as out:
            out.write(f"# {repo}:{tag} buildargs={json.dumps(r.buildargs)}\n")
            stream = client.api.build(fileobj=f, custom_context=True, tag=f"{repo}:{tag}", buildargs=r.buildargs,
                                      network_mode="host", rm=True, forcerm=True, pull=False, decode=True,
                                      labels=labels)
            for chunk in stream:
                if "stream" in chunk:
                    text = chunk["stream"]
                    out.write(text)
                    out.flush()
                    for line in text.splitlines():
                        if line.strip():
                            last = (last + [line])[-30:]
                            if line.startswith("Step "):
                                log(f"{r.name}: {line[:160]}")
                elif "error" in chunk:
                    out.write("ERROR: " + chunk["error"] + "\n")
                    raise ImageBuildError(f"building {r.name} failed: {chunk['error'].strip()}\n"
                                          + "\n".join(last[-15:]) + f"\nWhole output: {blog}")
                elif "status" in chunk:  # pulling an official base
                    out.write(f"{chunk.get('status')} {chunk.get('progress', '')}\n")
    except docker.errors.APIError as e:
        raise ImageBuildError(f"the engine refused to build {r.name}: {e}; see {blog}") from e
    finally:
        ctx_path.unlink(missing_ok=True)


def _build_recipe(client: docker.DockerClient, r: _Recipe, *, force: bool, log: Callable[[str], None],
                  sha_cache: dict) -> Built:
    t0 = time.monotonic()
    h = recipe_hash(r.dockerfile.read_text(), r.entries, r.buildargs, sha_cache)
    repo = f"{NAMESPACE}/{r.name}"
    tag = f"{r.version}-{h[:12]}"
    img = None if force else _exists(client, f"{repo}:{tag}")
    built = img is None
    if built:
        entries = list(r.entries)
        if r.prepare is not None:
            entries += r.prepare()
        _run_build(client, r, repo, tag, h, entries, log)
        img = _exists(client, f"{repo}:{tag}")
        if img is None:
            raise ImageBuildError(f"the build of {r.name} ended without an image {repo}:{tag}; "
                                  f"see {builds_dir() / (r.name + '.log')}")
    _alias(img, repo, r.version)
    if built:
        _drop_older(client, repo, r.version, tag)
    secs = time.monotonic() - t0
    if built:
        log(f"{r.name}: {repo}:{tag} in {secs:.0f}s")
    return Built(r.name, f"{repo}:{tag}", f"{repo}:{r.version}", img.id, built, secs, img.attrs.get("Size", 0))


def _jre_recipe(base_tag: str) -> _Recipe:
    return _Recipe("jre", JAVA_MAJOR, DOCKER_DIR / "jre" / "Dockerfile", [], {"BASE": base_tag})


def _kafka_recipe(jre_tag: str | None, official: str | None, release: str = "") -> _Recipe:
    entries = _tree(DOCKER_DIR / "kafka" / "onceproof", "onceproof")
    if official:
        version = jars.kafka_version(release)
        entries.append(_Entry("libs/"))  # an empty libs/: the official image's own jars stay
        args = {"BASE": official, "RUN_AS": OFFICIAL_RUN_AS["kafka"]}
        version = f"{version}-official"
    else:
        try:
            cp = jars.kafka_classpath(release)
        except jars.ResolveError as e:
            raise ImageBuildError(f"the Kafka broker jars could not be resolved: {e}") from e
        version = cp.version
        entries += [_Entry(f"libs/{j.name}", path=j) for j in cp.jars]
        args = {"BASE": jre_tag or "", "RUN_AS": "root"}
    return _Recipe("kafka", version, DOCKER_DIR / "kafka" / "Dockerfile", entries, args)


def python_requirements() -> dict[str, str]:
    """``{package: version}`` the spark image installs: :data:`SPARK_PYTHON` exactly as the running
    interpreter has them installed (the driver's: the cluster must run the driver's Spark; in a checkout,
    ``make setup`` installs them from ``constraints.txt``).

    Raises: ``ImageBuildError`` when one of them is not installed in the running interpreter.
    """
    try:
        return {name: metadata.version(name) for name in SPARK_PYTHON}
    except metadata.PackageNotFoundError as e:
        raise ImageBuildError(f"{e.name} is not installed in {sys.executable}: run `make setup`") from None


def wheelhouse() -> Path:
    """``$ONCEPROOF_CACHE/docker/wheels``: the wheels the spark image installs, kept between builds."""
    return engine_dir() / "wheels"


def gather_wheels(reqs: dict[str, str], dest: Path | None = None) -> list[Path]:
    """Wheels of exactly ``reqs`` (no dependencies) in ``dest`` (default :func:`wheelhouse`), by
    ``pip wheel`` of the running interpreter: a PySpark wheel pip built for the venv install is taken
    from pip's cache (PySpark is an sdist on PyPI; a miss downloads it once, ~460 MB, and builds it),
    confluent-kafka's manylinux wheel comes from the cache or PyPI. Returns the wheel files.

    Raises: ``ImageBuildError`` when pip fails (no access to PyPI and no cached wheel).
    """
    dest = dest or wheelhouse()
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {_norm(n): v for n, v in reqs.items()}
    found = _wheels_in(dest, wanted)
    if len(found) < len(wanted):
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", str(dest),
               *[f"{n}=={v}" for n, v in reqs.items()]]
        proc = subprocess.run(_heavy_prefix() + cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageBuildError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stdout[-1500:]}\n"
                                  f"{proc.stderr[-1500:]}\nCheck access to PyPI.")
        found = _wheels_in(dest, wanted)
    missing = set(wanted) - set(found)
    if missing:
        raise ImageBuildError(f"pip wheel left no wheel for {sorted(missing)} in {dest}")
    return [found[n] for n in sorted(found)]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheels_in(d: Path, wanted: dict[str, str]) -> dict[str, Path]:
    out = {}
    for w in d.glob("*.whl"):
        name, version = w.name.split("-")[:2]
        if wanted.get(_norm(name)) == version:
            out[_norm(name)] = w
    return out


def _spark_recipe(jre_tag: str | None, official: str | None) -> _Recipe:
    reqs = python_requirements()
    requirements = "".join(f"{n}=={v}\n" for n, v in reqs.items()).encode()
    try:
        kafka_cp = jars.spark_kafka_classpath()
    except jars.ResolveError as e:
        raise ImageBuildError(f"Spark's Kafka connector jars could not be resolved: {e}") from e
    entries = [_Entry("wheels/requirements.txt", data=requirements)]
    entries += [_Entry(f"spark-kafka/{j.name}", path=j) for j in kafka_cp.jars]
    # the wheels themselves are pinned by requirements.txt: gathered (and not hashed) only for a build
    def prepare() -> list[_Entry]:
        return [_Entry(f"wheels/{w.name}", path=w) for w in gather_wheels(reqs)]

    if official:
        args, version = {"BASE": official, "RUN_AS": OFFICIAL_RUN_AS["spark"]}, f"{reqs['pyspark']}-official"
    else:
        args, version = {"BASE": jre_tag or "", "RUN_AS": "root"}, reqs["pyspark"]
    return _Recipe("spark", version, DOCKER_DIR / "spark" / "Dockerfile", entries, args, prepare)


def _toxiproxy_recipe(base_tag: str) -> _Recipe:
    try:
        binary = toxiproxy.build_server()
    except toxiproxy.ToxiproxyBuildError as e:
        raise ImageBuildError(f"toxiproxy could not be built: {e}") from e
    return _Recipe("toxiproxy", toxiproxy.TOXIPROXY_VERSION.lstrip("v"), DOCKER_DIR / "toxiproxy" / "Dockerfile",
                   [_Entry("toxiproxy-server", path=binary, mode=0o755)], {"BASE": base_tag})


def _postgres_recipe(base_tag: str) -> _Recipe:
    return _Recipe("postgres", POSTGRES_MAJOR, DOCKER_DIR / "postgres" / "Dockerfile",
                   [_Entry("run", path=DOCKER_DIR / "postgres" / "run", mode=0o755)], {"BASE": base_tag})


def _node_recipe(jre_tag: str) -> _Recipe:
    """``onceproof/node``: a machine the ssh backend's tests reach only over SSH (``docker/node``)."""
    d = DOCKER_DIR / "node"
    return _Recipe("node", "1", d / "Dockerfile", [_Entry("sshd.conf", path=d / "sshd.conf"),
                                                   _Entry("entrypoint", path=d / "entrypoint", mode=0o755)],
                   {"BASE": jre_tag})


def build(client: docker.DockerClient, names: Iterable[str] = NAMES, *, kafka_base: str | None = None,
          spark_base: str | None = None, force: Iterable[str] = (), kafka_version: str = "",
          log: Callable[[str], None] = _say) -> list[Built]:
    """Build (or find by tag) ``names`` and what they are built on, in dependency order.

    Args:
        client: a docker SDK client (:class:`onceproof.backends.docker.engine.DockerEngine`'s).
        names: any of :data:`NAMES`; their bases are added (``kafka`` needs ``jre`` needs ``base``).
        kafka_base / spark_base: an official image to build on instead of the local ``jre`` (e.g.
            ``apache/kafka:4.1.1``); it must be pullable or present.
        kafka_version: the Kafka release of the ``kafka`` image (``--kafka-version``; default
            :func:`jars.kafka_version`, the pin), its jars resolved from Maven Central the first time.
        force: names to rebuild even when their tag exists.
        log: progress lines (one per Dockerfile step).

    Returns: one :class:`Built` per image, bases first.

    Raises: ``ImageBuildError`` (see :func:`build_base` and the module docstring).
    """
    if repository() is None:
        raise ImageBuildError("the Docker backend's images are built from a git checkout of onceproof (its "
                              "docker/ recipes are not in the wheel): clone the repository and run "
                              "`make docker-images` there")
    want = set(names)
    unknown = want - set(NAMES)
    if unknown:
        raise ImageBuildError(f"unknown image(s) {sorted(unknown)}: choose from {', '.join(NAMES)}")
    if "kafka" in want and not kafka_base or "spark" in want and not spark_base or "node" in want:
        want.add("jre")
    if want & {"jre", "toxiproxy", "postgres"}:
        want.add("base")
    force = set(force)
    out: list[Built] = []
    sha_cache = _load_sha_cache()
    try:
        base = jre = None
        if "base" in want:
            base = build_base(client, force="base" in force, log=log)
            out.append(base)
        if "jre" in want:
            jre = _build_recipe(client, _jre_recipe(base.tag), force="jre" in force, log=log, sha_cache=sha_cache)
            out.append(jre)
        if "kafka" in want:
            out.append(_build_recipe(client, _kafka_recipe(jre.tag if jre else None, kafka_base, kafka_version),
                                     force="kafka" in force, log=log, sha_cache=sha_cache))
        if "spark" in want:
            out.append(_build_recipe(client, _spark_recipe(jre.tag if jre else None, spark_base),
                                     force="spark" in force, log=log, sha_cache=sha_cache))
        if "toxiproxy" in want:
            out.append(_build_recipe(client, _toxiproxy_recipe(base.tag), force="toxiproxy" in force, log=log,
                                     sha_cache=sha_cache))
        if "postgres" in want:
            out.append(_build_recipe(client, _postgres_recipe(base.tag), force="postgres" in force, log=log,
                                     sha_cache=sha_cache))
        if "node" in want:
            out.append(_build_recipe(client, _node_recipe(jre.tag), force="node" in force, log=log,
                                     sha_cache=sha_cache))
    finally:
        _save_sha_cache(sha_cache)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m onceproof.backends.docker.images build|list`` (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m onceproof.backends.docker.images", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the images (a no-op for those whose tag exists)")
    b.add_argument("names", nargs="*", default=list(NAMES), help=f"any of {', '.join(NAMES)} (default: all)")
    b.add_argument("--kafka-base", default=os.environ.get("ONCEPROOF_KAFKA_BASE") or None,
                   help="official image to build kafka on, e.g. apache/kafka:4.1.1 (default: local jre)")
    b.add_argument("--spark-base", default=os.environ.get("ONCEPROOF_SPARK_BASE") or None,
                   help="official image to build spark on, e.g. apache/spark:<tag> (default: local jre)")
    b.add_argument("--force", nargs="*", default=[], help="rebuild these even when their tag exists")
    b.add_argument("--json", action="store_true", help="print the results as JSON lines")
    sub.add_parser("list", help="the onceproof images the engine has")
    a = ap.parse_args(argv)
    try:
        eng = DockerEngine().start()  # left running: the images live in it
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if eng.started:
        print(f"started dockerd pid {eng.pid} (data-root {eng.data_root}); stop it with "
              "`python -m onceproof.backends.docker.engine stop`", flush=True)
    if a.cmd == "list":
        for img in eng.client.images.list(name=f"{NAMESPACE}/*"):
            print(f"{img.short_id}  {img.attrs.get('Size', 0) / 1e6:8.0f} MB  {' '.join(img.tags)}")
        return 0
    try:
        results = build(eng.client, a.names, kafka_base=a.kafka_base, spark_base=a.spark_base, force=a.force)
    except ImageBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for r in results:
        if a.json:
            print(json.dumps(r.__dict__))
        else:
            print(f"{r.name:<10} {'built ' if r.built else 'cached'} {r.seconds:7.1f}s "
                  f"{r.size_bytes / 1e6:7.0f} MB  {r.tag}  (= {r.alias})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
