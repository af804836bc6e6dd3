"""Named fault packages (Jepsen's ``--nemesis`` packages for ``test-all``): each names the faults aimed
at one class of failure, so a suite reads "eos × network" rather than a list of specs.

* ``process`` – executor, driver and broker kills, zombie tasks (a task that outlives its executor) and a
  driver killed mid-transaction whose restart is slow to reach that partition (``restart-mid-txn``);
* ``pause`` – brokers paused (SIGSTOP) and resumed;
* ``network`` – partitions and slow links (toxiproxy);
* ``lossy`` – links that reset, stall, cut or drop (``lossy-link``: toxiproxy's ``reset_peer``, ``timeout``,
  ``limit_data``; iptables' random drop); a package of its own so that ``network`` suites keep their length
  and need no root;
* ``commit`` – the commit window and every commit-delay target;
* ``operator`` – what an operator does on purpose: a broker's clean bounce (controlled shutdown), a
  rolling restart of every broker, a preferred leader election (``nemesis/operator.py``), a partition
  reassignment of the output and of the input topic with Kafka's own tool (``nemesis/reassign.py``), the input
  topic grown (``nemesis/grow.py``);
* ``clock`` – the transaction coordinator's clock jumping forward and back past ``transaction.timeout.ms``
  (``clock-skew``, libfaketime: ``nemesis/clock.py``) and the driver's clock jumping forward and back
  (``driver-clock-skew``: ``nemesis/driver_clock.py``); a package of its own so that no other suite needs
  libfaketime;
* ``disk`` – a crashed broker's active segment garbled before it restarts, a broker's disk full
  (``corrupt-segment-tail``, ``disk-full``: ``nemesis/disk.py``), and a broker's power cut that drops what it had
  not fsynced (``lose-unsynced-writes``: ``nemesis/lazyfs_fault.py``, a FUSE layer); a package of its own so
  that no other suite needs tmpfs or FUSE mounts (root);
* ``stale-requests`` – one broker's client requests held past the client's timeout on about half the
  connections, so that a request of one transaction reaches its broker after the transaction ended
  (``delay-txn-requests``: ``nemesis/stale_request.py``, KAFKA-17754), aimed at the ``eos-long-lived-producer``
  mutant; a package of its own because each turn holds for over a minute;
* ``upgrade`` – a driver stopped mid-batch (killed, or ``query.stop()``) and restarted from its checkpoint
  into a changed configuration or the previous PySpark;
* ``traps`` – what no pipeline survives unharmed, to show how a job fails and what fixes it: input records
  deleted before the query read them (``delete-input-records``, KIP-107) and the query's checkpoint lost
  (``lose-checkpoint``); its cells expect ``invalid`` for every sink (:data:`EXPECT_INVALID`);
* ``all`` – every fault of every package.

Pure data over ``nemesis/catalog.py``'s names.
"""

from __future__ import annotations

PACKAGES: dict[str, tuple[str, ...]] = {
    "process": ("kill-executor", "kill-driver", "kill-broker", "zombie-task:precommit", "zombie-task:preinit",
                "restart-mid-txn"),
    "pause": ("pause-broker",),
    "network": ("partition", "slow-network"),
    "lossy": ("lossy-link:reset-peer", "lossy-link:timeout", "lossy-link:limit-data", "lossy-link:drop"),
    "commit": ("kill-driver-in-commit-window", "commit-delay:precommit", "commit-delay:notify",
               "commit-delay:txn-timeout"),
    "operator": ("bounce-broker:leader", "bounce-broker:txn-coordinator", "rolling-restart", "elect-leaders",
                 "reassign-partitions:output", "reassign-partitions:input", "add-input-partitions"),
    "clock": ("clock-skew:broker-jump-forward", "clock-skew:broker-jump-back", "driver-clock-skew:jump-forward",
              "driver-clock-skew:jump-back"),
    "disk": ("corrupt-segment-tail:leader", "corrupt-segment-tail:one", "disk-full:leader", "disk-full:one",
             "lose-unsynced-writes:one", "lose-unsynced-writes:leader"),
    "stale-requests": ("delay-txn-requests:endtxn", "delay-txn-requests:produce"),
    "upgrade": ("upgrade:min-partitions", "upgrade:max-offsets", "upgrade:graceful", "upgrade:pyspark"),
    "traps": ("delete-input-records", "lose-checkpoint"),
}
EXPECT_INVALID = frozenset({"traps"})
"""Packages whose faults no pipeline survives unharmed: their test-all cells expect ``invalid`` whatever the sink."""


def names() -> list[str]:
    """Every package name, ``all`` last."""
    return [*PACKAGES, "all"]


def specs(package: str) -> list[str]:
    """The fault specs of ``package`` (``all``: every package's, in order, without repeats).

    Raises: ``ValueError`` naming the known packages.
    """
    if package == "all":
        return list(dict.fromkeys(s for p in PACKAGES.values() for s in p))
    try:
        return list(PACKAGES[package])
    except KeyError:
        raise ValueError(f"unknown fault package {package!r}; choose from {', '.join(names())}") from None


def parse(text: str) -> list[str]:
    """``"process,network"`` → ``["process", "network"]``, each checked (``ValueError`` as :func:`specs`)."""
    out = [p.strip() for p in text.split(",") if p.strip()]
    for p in out:
        specs(p)
    return list(dict.fromkeys(out))
