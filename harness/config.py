"""``TestConfig``: everything that defines a run, the one source of the CLI's ``run`` options, the replay
command and ``test.json``'s ``config``. Times in seconds unless the name ends in ``_ms``."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.store import DEFAULT_ROOT
from nemesis import catalog


@dataclass
class TestConfig:
    """Everything that defines a run; saved as ``test.json``. Times in seconds unless named ``_ms``."""

    sink: str = "eos"
    nemesis: list[str] = field(default_factory=list)
    nemesis_interval: float = 10.0
    time_limit: float = 60.0
    rate: float = 300.0
    keys: int = 50
    seed: int = 0
    recovery_timeout: float = 180.0
    startup_timeout: float = 240.0
    trigger_ms: int = 1000
    max_offsets: int = 5000
    txn_timeout_ms: int = 30000
    fault_hold: float = 6.0
    max_run_factor: float = 3.0
    partitions: int = 6
    brokers: int = 3
    master: str = "local-cluster[2,1,1024]"
    test_name: str = ""
    results_root: Path = DEFAULT_ROOT
    keep_data: bool = False
    proxy: bool = False  # put the cluster behind toxiproxy even without a network fault

    @property
    def proxied(self) -> bool:
        return self.proxy or catalog.needs_proxy(self.nemesis)

    @property
    def name(self) -> str:
        if self.test_name:
            return self.test_name
        if self.nemesis and sorted(self.nemesis) == sorted(catalog.FAULTS):
            faults = "all"
        elif len(self.nemesis) > 3:
            faults = f"{len(self.nemesis)}-faults"
        else:
            faults = "+".join(self.nemesis).replace(":", "-") or "no-faults"
        return f"{self.sink}-{faults}"

    def replay_command(self) -> str:
        """The command line that replays this run's workload and fault schedule."""
        faults = "all" if self.nemesis and sorted(self.nemesis) == sorted(catalog.FAULTS) else \
            ",".join(self.nemesis) or "none"
        parts = ["onceproof", "run", "--sink", self.sink, "--nemesis", faults,
                 "--nemesis-interval", f"{self.nemesis_interval:g}", "--time-limit", f"{self.time_limit:g}",
                 "--rate", f"{self.rate:g}", "--keys", str(self.keys), "--seed", str(self.seed),
                 "--fault-hold", f"{self.fault_hold:g}", "--txn-timeout-ms", str(self.txn_timeout_ms)]
        return shlex.join(parts)
