#!/usr/bin/env python3
"""onceproof's helper on a node of ``--backend ssh``: shipped as one file to ``<root>/bin/onceproof-node.py``
and run there with the node's own ``python3`` (3.8 or later). **Standard library only, no onceproof
import** (a unit test checks it): a node has Java and Python and nothing of ours.

It keeps everything of a run below ``<root>/runs/<run>/``, and is the one place that starts, signals and
sweeps processes on the node, so that the harness (over SSH) and the node's own watchdog use the same
rules. Every line it prints is one JSON object.

Commands (``python3 onceproof-node.py <command> --root R --run ID ...``):

* ``start --name N --log FILE [--env K=V ...] [--cwd DIR] -- ARGV...``: start ARGV in a session of its
  own (process group = its pid), stdin from /dev/null, stdout and stderr to FILE, with ``ONCEPROOF_RUN=ID``
  in its environment. A small monitor process waits for it and writes ``pids/N.exit``
  (``{"code"}`` or ``{"signal"}``, and the time), so a kill leaves evidence. ``pids/N.json`` holds
  ``{pid, start_ticks, boot_id, argv0}``: ``start_ticks`` is field 22 of ``/proc/<pid>/stat`` (proc(5)),
  which tells a reused pid from ours. Prints ``{"pid": ...}``.
* ``status --name N``: ``{"pid", "state", "exit"}``; ``state`` in psutil's names (``running``,
  ``sleeping``, ``disk-sleep``, ``stopped``, ``zombie``, ``idle``) or ``gone``.
* ``signal --name N --sig KILL|TERM|STOP|CONT``: to N's process group, only while ``start_ticks`` still
  match (else ``{"sent": false, "why": "foreign"}``).
* ``sweep``: SIGKILL every recorded group whose ticks match, then for ≤ 10 s every process whose
  environment holds ``ONCEPROOF_RUN=ID``; remove the iptables chains named ``OP-<run8>...`` (and the jumps
  to them) and the root qdiscs recorded in ``net/qdisc-<dev>.json``; detach every lazyfs layer
  (``fuse.onceproof-lazyfs``: the layers were killed with the rest) and unmount every ``onceproof-disk`` tmpfs
  inside the run's directory; write ``swept.json``. Idempotent.
* ``hold``: the harness's lease, held open over SSH for the whole run. Each line read from stdin
  (``beat``) touches ``heartbeat``; ``release`` writes ``released`` (a clean end: the watchdog leaves);
  end of input without ``release`` (the harness or its connection died: the kernel closed its socket,
  sshd closed the channel) writes ``lease.ended``.
* ``executors [--pid P]``: the run's Spark executor JVMs on the node (processes tagged ``ONCEPROOF_RUN=ID``
  whose command line holds ``CoarseGrainedExecutorBackend``), each ``{"pid", "id", "start_ticks",
  "started", "cpu_s"}``: ``id`` its ``--executor-id``, ``started`` epoch seconds (``btime`` of /proc/stat
  plus its start ticks), ``cpu_s`` user + system seconds (fields 14 and 15 of /proc/<pid>/stat). With
  ``--pid``, only the executor above process P (the Python worker of a task: worker ← daemon ← executor),
  ``{"executors": []}`` when there is none. Prints ``{"executors": [...]}``.
* ``kill-executor --pid P --started S``: SIGKILL the executor P alone (its Spark worker notices), only while it
  is the run's, an executor, and started at S (``executors``' ``started``, to the millisecond); waits ≤ 10 s
  for it to be gone (or a zombie: its worker reaps it). Prints ``{"gone": bool, "why"?}``.
* ``disk --op mount|fill|unfill|umount --path P [--mb N]``: a size-limited data filesystem for a broker
  (``disk-full``): ``mount`` a tmpfs of N MiB (source ``onceproof-disk``, mode 0755, owned by the login user
  under ``sudo``) on the empty directory P;
  ``fill`` takes every free byte of it with the file ``onceproof-disk-fill`` (``fallocate``, then 1 MiB and
  4 KiB writes until ``ENOSPC``) and prints ``{"path", "size_bytes", "free_before", "filled_bytes",
  "free_after"}``; ``unfill`` removes that file (``{"freed"}``); ``umount`` unmounts it (lazily when busy).
  P must lie inside the run's directory, and only a tmpfs of source ``onceproof-disk`` is filled or
  unmounted, so no filesystem of the node's own is ever touched. The same steps as the local backend's
  ``backends/common/tmpfs.py``, restated here because this file may import nothing of onceproof. Needs root
  (``become``) and, in a container, ``CAP_SYS_ADMIN``: without it ``mount`` prints ``{"error"}``.
* ``unwheel -- SRC DEST``: unpack every ``SRC/*.whl`` into ``DEST`` keeping each file's mode
  (``ZipInfo.external_attr >> 16``; ``python -m zipfile`` drops modes, and ``pyspark/bin/spark-class`` must
  stay executable). Prints ``{"wheels": n, "files": m}``.
* ``watchdog --lease-s S [--grace-s G]``: detaches (double fork, new session) and watches the lease every
  0.5 s: after ``released`` it exits; ``G`` seconds after ``lease.ended`` with no newer heartbeat, or when
  the last heartbeat is older than ``S`` seconds, it sweeps and exits. Prints ``{"pid"}``.

Exit status: 0 done, 2 bad arguments, 3 no such process name.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

SWEEP_S = 10.0
STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop",
          "Z": "zombie", "X": "dead", "I": "idle", "P": "parked"}


def _dirs(a):
    """The run's directories, made when missing. Run through ``sudo``, they are given to the login user
    (``SUDO_UID``/``SUDO_GID``), so the harness's own commands and SFTP can still write there."""
    runs = os.path.join(a.root, "runs")
    run = os.path.join(runs, a.run)
    pids = os.path.join(run, "pids")
    net = os.path.join(run, "net")
    made = [d for d in (runs, run, pids, net) if not os.path.isdir(d)]
    os.makedirs(pids, exist_ok=True)
    os.makedirs(net, exist_ok=True)
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() == 0 and uid and gid:
        for d in made:
            try:
                os.chown(d, int(uid), int(gid))
            except OSError:
                pass
    return run, pids


def _stat(pid):
    """(state letter, start ticks) of ``pid`` from /proc/<pid>/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()  # fields from 3 on; comm (field 2) may hold spaces
    return rest[0], int(rest[19])


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _ours(rec):
    """Whether the process recorded in ``rec`` is still the one we started (same pid, same start ticks)."""
    if not rec or rec.get("boot_id", "") != _boot_id():
        return False
    st = _stat(int(rec["pid"]))
    return st is not None and st[1] == int(rec["start_ticks"])


def _out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def cmd_start(a):
    run, pids = _dirs(a)
    if not a.argv:
        _out({"error": "nothing to start: give the command after --"})
        return 2
    env = dict(os.environ)
    for kv in a.env or []:
        k, _, v = kv.partition("=")
        env[k] = v
    env["ONCEPROOF_RUN"] = a.run
    os.makedirs(os.path.dirname(os.path.abspath(a.log)), exist_ok=True)
    r, w = os.pipe()
    monitor = os.fork()
    if monitor == 0:  # the monitor: its own session, waits for the child and records how it ended
        try:
            os.close(r)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            child = os.fork()
            if child == 0:
                os.close(w)
                os.setsid()  # a session and group of its own: signals go to the group (pgid = pid)
                log = os.open(a.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                if a.cwd:
                    os.chdir(a.cwd)
                try:
                    os.execvpe(a.argv[0], a.argv, env)
                finally:
                    os._exit(127)
            st = _stat(child)
            rec = {"pid": child, "start_ticks": st[1] if st else -1, "boot_id": _boot_id(), "argv0": a.argv[0],
                   "name": a.name, "log": a.log}
            _write_json(os.path.join(pids, a.name + ".json"), rec)
            try:
                os.unlink(os.path.join(pids, a.name + ".exit"))
            except OSError:
                pass
            os.write(w, json.dumps(rec).encode())
            os.close(w)
            _, status = os.waitpid(child, 0)
            ended = {"time": time.time()}
            if os.WIFSIGNALED(status):
                ended["signal"] = os.WTERMSIG(status)
            else:
                ended["code"] = os.WEXITSTATUS(status)
            _write_json(os.path.join(pids, a.name + ".exit"), ended)
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(monitor, os.WNOHANG)
    if not data:
        _out({"error": "the process did not start"})
        return 1
    _out(json.loads(data.decode()))
    return 0


def _record(a):
    _, pids = _dirs(a)
    return _read_json(os.path.join(pids, a.name + ".json")), _read_json(os.path.join(pids, a.name + ".exit"))


def cmd_status(a):
    rec, ended = _record(a)
    if rec is None:
        _out({"error": f"no process named {a.name}"})
        return 3
    st = _stat(int(rec["pid"])) if _ours(rec) else None
    _out({"pid": rec["pid"], "state": STATES.get(st[0], st[0]) if st else "gone", "exit": ended})
    return 0


def cmd_signal(a):
    rec, _ = _record(a)
    if rec is None:
        _out({"error": f"no process named {a.name}"})
        return 3
    if not _ours(rec):
        _out({"sent": False, "why": "gone" if _stat(int(rec["pid"])) is None else "foreign", "pid": rec["pid"]})
        return 0
    sig = getattr(signal, "SIG" + a.sig.upper())
    try:
        os.killpg(int(rec["pid"]), sig)
    except ProcessLookupError:
        _out({"sent": False, "why": "gone", "pid": rec["pid"]})
        return 0
    _out({"sent": True, "pid": rec["pid"], "signal": a.sig.upper()})
    return 0


def _is_tagged(pid, run_id):
    """Whether process ``pid``'s environment holds ONCEPROOF_RUN=<run_id>."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return ("ONCEPROOF_RUN=" + run_id).encode() in f.read().split(b"\0")
    except OSError:
        return False


def _tagged(run_id, exclude):
    """Pids whose environment holds ONCEPROOF_RUN=<run_id> (readable ones: all of them as root)."""
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in exclude and _is_tagged(d, run_id)]


EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [x.decode(errors="replace") for x in f.read().split(b"\0") if x]
    except OSError:
        return []


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0
    return int(s[s.rindex(")") + 2:].split()[1])


def _btime():
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return int(line.split()[1])
    return 0


def _executor(pid, hz, btime):
    """``{"pid", "id", "start_ticks", "started", "cpu_s"}`` of executor JVM ``pid``, None when it is not one."""
    argv = _cmdline(pid)
    if not any(EXECUTOR_MAIN in a for a in argv):
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    eid = argv[argv.index("--executor-id") + 1] if "--executor-id" in argv[:-1] else "?"
    ticks = int(rest[19])
    return {"pid": pid, "id": eid, "start_ticks": ticks, "started": btime + ticks / hz,
            "cpu_s": (int(rest[11]) + int(rest[12])) / hz}


def cmd_executors(a):
    hz, btime = os.sysconf("SC_CLK_TCK"), _btime()
    if a.pid:
        pid, seen = int(a.pid), 0
        while pid > 1 and seen < 16:
            ex = _executor(pid, hz, btime)
            if ex is not None:
                _out({"executors": [ex] if _is_tagged(pid, a.run) else []})
                return 0
            pid, seen = _ppid(pid), seen + 1
        _out({"executors": []})
        return 0
    out = [ex for ex in (_executor(p, hz, btime) for p in _tagged(a.run, {os.getpid()})) if ex is not None]
    _out({"executors": out})
    return 0


def cmd_kill_executor(a):
    pid = int(a.pid or 0)
    st = _stat(pid)
    if st is None or st[0] == "Z":
        _out({"gone": True, "why": "gone"})
        return 0
    hz, btime = os.sysconf("SC_CLK_TCK"), _btime()
    ex = _executor(pid, hz, btime)
    if ex is None or abs(ex["started"] - a.started) > 1e-3 or not _is_tagged(pid, a.run):
        _out({"gone": True, "why": "foreign"})  # the pid now belongs to another process: ours is gone
        return 0
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        _out({"gone": True})
        return 0
    t0 = time.time()
    while time.time() - t0 < 10:
        st = _stat(pid)
        if st is None or st[0] == "Z" or st[1] != ex["start_ticks"]:
            _out({"gone": True, "after_s": round(time.time() - t0, 3)})
            return 0
        time.sleep(0.05)
    _out({"gone": False, "why": "still alive 10 s after SIGKILL"})
    return 0


def _iptables_chains(prefix):
    """Remove every chain whose name starts with ``prefix`` from iptables' filter table (jumps first)."""
    removed = []
    try:
        rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return removed
    if rules.returncode != 0:
        return removed
    chains = [ln.split()[1] for ln in rules.stdout.splitlines() if ln.startswith("-N " + prefix)]
    for ln in rules.stdout.splitlines():
        m = re.match(rf"-A (\S+) (.*)-j ({re.escape(prefix)}\S*)\s*$", ln)
        if m and not m.group(1).startswith(prefix):
            subprocess.run(["iptables", "-w", "-D", m.group(1)] + (m.group(2).split()) + ["-j", m.group(3)],
                           capture_output=True, timeout=20)
    for c in chains:
        subprocess.run(["iptables", "-w", "-F", c], capture_output=True, timeout=20)
        if subprocess.run(["iptables", "-w", "-X", c], capture_output=True, timeout=20).returncode == 0:
            removed.append(c)
    return removed


def _qdiscs(net_dir):
    removed = []
    for f in sorted(os.listdir(net_dir)) if os.path.isdir(net_dir) else []:
        if not (f.startswith("qdisc-") and f.endswith(".json")):
            continue
        rec = _read_json(os.path.join(net_dir, f)) or {}
        dev = rec.get("dev") or f[len("qdisc-"):-len(".json")]
        show = subprocess.run(["tc", "qdisc", "show", "dev", dev, "root"], capture_output=True, text=True, timeout=20)
        if rec.get("handle") and f"qdisc {rec.get('kind', '')} {rec['handle']}" in show.stdout:
            subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=20)
            removed.append(dev)
        os.unlink(os.path.join(net_dir, f))
    return removed


DISK_SOURCE = "onceproof-disk"
FILL_NAME = "onceproof-disk-fill"


def _run_mounts(run, fstype, source=None):
    """Mount points of file systems of type ``fstype`` (and source ``source``, when given) inside ``run``,
    from /proc/self/mountinfo (its fields: proc(5); a dead FUSE mount is never stat'ed)."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    base = os.path.realpath(run) + os.sep
    for line in lines:
        left, sep, right = line.partition(" - ")
        parts, tail = left.split(), right.split()
        if sep and len(parts) >= 5 and tail[:1] == [fstype] and (source is None or tail[1:2] == [source]):
            point = parts[4].encode().decode("unicode_escape")
            if point.startswith(base):
                out.append(point)
    return out


def _our_mounts(run):
    """Mount points of ``onceproof-disk`` tmpfs mounts inside ``run``."""
    return _run_mounts(run, "tmpfs", DISK_SOURCE)


LAZYFS_TYPE = "fuse.onceproof-lazyfs"


def _lazy_mounts(run):
    """Mount points of onceproof's lazyfs layer (``lose-unsynced-writes``) inside ``run``."""
    return _run_mounts(run, LAZYFS_TYPE)


def _umount(point, fuse=False):
    tries = [["fusermount3", "-u", "-z", point], ["fusermount", "-u", "-z", point]] if fuse else []
    for args in tries + [["umount", point], ["umount", "-l", point]]:
        try:
            if subprocess.run(args, capture_output=True, timeout=30).returncode == 0:
                return True
        except (OSError, subprocess.SubprocessError):
            pass
    return False


def _fill(path):
    import errno
    st = os.statvfs(path)
    before = st.f_bavail * st.f_frsize
    target = os.path.join(path, FILL_NAME)
    fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        if before:
            try:
                os.posix_fallocate(fd, os.fstat(fd).st_size, before)
            except OSError:
                pass
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        break
                    raise
    finally:
        os.close(fd)
    after = os.statvfs(path)
    return {"path": target, "size_bytes": st.f_blocks * st.f_frsize, "free_before": before,
            "filled_bytes": os.stat(target).st_size, "free_after": after.f_bavail * after.f_frsize}


def cmd_disk(a):
    run, _ = _dirs(a)
    path = os.path.realpath(a.path or "")
    if not a.path or not path.startswith(os.path.realpath(run) + os.sep):
        _out({"error": f"--path must lie inside the run's directory {run}"})
        return 2
    ours = path in _our_mounts(run)
    if a.op == "mount":
        if ours:
            _out({"mounted": path, "already": True})
            return 0
        os.makedirs(path, exist_ok=True)
        opts = f"size={int(a.mb)}m,mode=0755"
        uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
        if uid and gid:  # the login user's, as _dirs gives it the run's directories (it formats the storage)
            opts += f",uid={int(uid)},gid={int(gid)}"
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, DISK_SOURCE, path],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            _out({"error": f"mount -t tmpfs on {path} failed: {(p.stderr or p.stdout).strip()[:200]} "
                           "(needs root, and CAP_SYS_ADMIN in a container)"})
            return 1
        _out({"mounted": path})
    elif a.op == "fill":
        if not ours:
            _out({"error": f"{path} is not a size-limited disk of this run: refusing to fill it"})
            return 1
        _out(_fill(path))
    elif a.op == "unfill":
        target = os.path.join(path, FILL_NAME)
        try:
            size = os.stat(target).st_size
            os.unlink(target)
        except OSError:
            size = 0
        _out({"freed": size})
    else:
        _out({"unmounted": _umount(path) if ours else False})
    return 0


def sweep(a):
    run, pids = _dirs(a)
    me = {os.getpid(), os.getppid()}
    killed = []
    for f in sorted(os.listdir(pids)):
        if not f.endswith(".json") or f.startswith("watchdog"):
            continue
        rec = _read_json(os.path.join(pids, f))
        if rec and _ours(rec):
            try:
                os.killpg(int(rec["pid"]), signal.SIGKILL)
                killed.append({"name": rec.get("name"), "pid": rec["pid"]})
            except OSError:
                pass
    tagged_killed = []
    deadline = time.monotonic() + SWEEP_S
    while True:
        left = _tagged(a.run, me)
        if not left or time.monotonic() > deadline:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                tagged_killed.append(pid)
            except OSError:
                pass
        time.sleep(0.2)
    chains = _iptables_chains("OP-" + a.run[:8]) if os.geteuid() == 0 else []
    qdiscs = _qdiscs(os.path.join(run, "net")) if os.geteuid() == 0 else []
    mounts = [m for m in _lazy_mounts(run) if _umount(m, fuse=True)] if os.geteuid() == 0 else []
    mounts += [m for m in _our_mounts(run) if _umount(m)] if os.geteuid() == 0 else []
    result = {"time": time.time(), "groups_killed": killed, "tagged_killed": sorted(set(tagged_killed)),
              "left": left, "chains_removed": chains, "qdiscs_removed": qdiscs, "mounts_removed": mounts,
              "by": a.command}
    _write_json(os.path.join(run, "swept.json"), result)
    return result


def cmd_sweep(a):
    _out(sweep(a))
    return 0


def cmd_hold(a):
    run, _ = _dirs(a)
    hb = os.path.join(run, "heartbeat")
    for name in ("released", "lease.ended"):
        try:
            os.unlink(os.path.join(run, name))
        except OSError:
            pass
    open(hb, "a").close()
    os.utime(hb)
    _out({"holding": a.run})
    for line in sys.stdin:
        if line.strip() == "release":
            open(os.path.join(run, "released"), "w").close()
            return 0
        os.utime(hb)
    _write_json(os.path.join(run, "lease.ended"), {"time": time.time()})
    return 0


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def cmd_watchdog(a):
    run, pids = _dirs(a)
    hb = os.path.join(run, "heartbeat")
    if _mtime(hb) is None:
        open(hb, "a").close()
    r, w = os.pipe()
    if os.fork() > 0:
        os.close(w)
        pid = os.read(r, 64).decode()
        _out({"pid": int(pid) if pid else None})
        return 0
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    st = _stat(os.getpid())
    _write_json(os.path.join(pids, "watchdog.json"),
                {"pid": os.getpid(), "start_ticks": st[1] if st else -1, "boot_id": _boot_id()})
    os.write(w, str(os.getpid()).encode())
    os.close(w)
    a.command = "watchdog"
    while True:
        time.sleep(0.5)
        if os.path.exists(os.path.join(run, "released")):
            os._exit(0)
        beat = _mtime(hb) or 0.0
        ended = _read_json(os.path.join(run, "lease.ended"))
        now = time.time()
        if (ended and now - ended.get("time", now) >= a.grace_s and beat <= ended.get("time", now)) \
                or now - beat > a.lease_s:
            sweep(a)
            os._exit(0)


def cmd_unwheel(a):
    import zipfile
    if len(a.argv) != 2:
        _out({"error": "unwheel needs -- SRC DEST"})
        return 2
    src, dest = a.argv
    wheels = sorted(f for f in os.listdir(src) if f.endswith(".whl"))
    files = 0
    for w in wheels:
        with zipfile.ZipFile(os.path.join(src, w)) as z:
            for info in z.infolist():
                path = z.extract(info, dest)
                mode = info.external_attr >> 16
                if mode and not info.is_dir():
                    os.chmod(path, mode & 0o7777)
                files += 1
    _out({"wheels": len(wheels), "files": files})
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="onceproof-node.py")
    ap.add_argument("command", choices=["start", "status", "signal", "sweep", "hold", "watchdog", "unwheel",
                                           "executors", "kill-executor", "disk"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--name")
    ap.add_argument("--log")
    ap.add_argument("--env", action="append")
    ap.add_argument("--cwd")
    ap.add_argument("--sig", default="KILL")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--started", type=float, default=-1.0)
    ap.add_argument("--lease-s", type=float, default=20.0)
    ap.add_argument("--grace-s", type=float, default=5.0)
    ap.add_argument("--op", choices=["mount", "fill", "unfill", "umount"])
    ap.add_argument("--path")
    ap.add_argument("--mb", type=int, default=512)
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    a = ap.parse_args(args[:cut])
    a.argv = args[cut + 1:]
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", a.run):
        _out({"error": f"bad --run {a.run!r}"})
        return 2
    if a.command in ("start", "status", "signal") and not (a.name and re.fullmatch(r"[A-Za-z0-9._-]{1,64}", a.name)):
        _out({"error": "--name is required (letters, digits, . _ -)"})
        return 2
    if a.command == "kill-executor" and not (a.pid and a.started >= 0):
        _out({"error": "kill-executor needs --pid and --started"})
        return 2
    if a.command == "disk" and not a.op:
        _out({"error": "disk needs --op mount|fill|unfill|umount and --path"})
        return 2
    if a.command == "start" and not a.log:
        _out({"error": "--log is required"})
        return 2
    return {"start": cmd_start, "status": cmd_status, "signal": cmd_signal, "sweep": cmd_sweep,
            "hold": cmd_hold, "watchdog": cmd_watchdog, "unwheel": cmd_unwheel, "executors": cmd_executors,
            "kill-executor": cmd_kill_executor, "disk": cmd_disk}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
