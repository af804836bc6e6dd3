"""onceproof.registry.Registry, and the four registries built on it (sinks, workloads, backends, engines)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from onceproof.backends import registry as backends
from onceproof.backends.base import BackendError
from onceproof.checking import engines
from onceproof.registry import Registry
from onceproof.sinks import registry as sinks
from onceproof.workloads import registry as workloads


def test_get_imports_the_entry_and_a_mapping_holds_several_by_name():
    r = Registry("thing", {"dumps": "json:dumps", "sep": "os.path:__dict__"})
    assert r.names() == ["dumps", "sep"] and "dumps" in r and "nope" not in r
    import json

    assert r.get("dumps") is json.dumps
    assert r.get("sep") == "/"  # os.path.__dict__["sep"]: a mapping entry is looked up by the name


def test_an_unknown_name_raises_the_registrys_error_naming_every_choice():
    with pytest.raises(KeyError, match=r"unknown thing 'x'; choose one of a, b"):
        Registry("thing", {"a": "json:dumps", "b": "json:loads"}, KeyError).get("x")
    with pytest.raises(BackendError, match="unknown backend 'nope'; choose one of local, docker"):
        backends.get("nope")
    for reg, kind in ((sinks, "sink"), (workloads, "workload"), (engines, "engine")):
        with pytest.raises(ValueError, match=f"unknown {kind} 'nope'"):
            reg.get("nope")


def test_listing_names_imports_no_entry():
    code = ("import sys\nfrom onceproof.sinks import registry as s\nfrom onceproof.checking import engines as e\n"
            "from onceproof.backends import registry as b\nprint(s.names(), e.names(), b.names())\n"
            "assert 'onceproof.checking.spark.checks' not in sys.modules and 'pyspark' not in sys.modules\n"
            "assert 'onceproof.backends.docker.backend' not in sys.modules\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "'eos'" in p.stdout and "'spark'" in p.stdout and "'docker'" in p.stdout
