"""onceproof.backends.gobuild.built_once: the build-once pattern shared by toxiproxy's server and the Compose plugin."""

from __future__ import annotations

import pytest

from onceproof.backends.gobuild import built_once, go_env


def test_builds_once_then_reuses_and_a_failed_build_leaves_nothing(tmp_path):
    target, calls = tmp_path / "tool-v1", []

    def build(tmp):
        calls.append(tmp)
        (tmp / "tool").write_text("#!/bin/sh\n")

    first = built_once(target, "tool", "v1", build)
    assert first == target / "tool" and first.exists()
    assert (target / ".complete").read_text().strip() == "v1"
    assert built_once(target, "tool", "v1", build) == first and len(calls) == 1

    other = tmp_path / "tool-v2"

    def broken(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("no network to the Go module proxy")

    with pytest.raises(RuntimeError, match="Go module proxy"):
        built_once(other, "tool", "v2", broken)
    assert not other.exists(), "a failed build must not leave a directory that looks built"
    with pytest.raises(FileNotFoundError, match="left no tool"):
        built_once(other, "tool", "v2", lambda tmp: None)
    assert not (other / ".complete").exists()


def test_go_env_keeps_the_users_go_settings_out(monkeypatch, tmp_path):
    monkeypatch.setenv("GOFLAGS", "-mod=vendor")
    monkeypatch.setenv("GOWORK", "/somewhere/go.work")
    monkeypatch.delenv("GOBIN", raising=False)
    env = go_env(gobin=tmp_path)
    assert env["GOFLAGS"] == "-modcacherw -trimpath -buildvcs=false" and env["GOWORK"] == "off"
    assert env["GOBIN"] == str(tmp_path) and env["CGO_ENABLED"] == "0"
    assert "GOBIN" not in go_env()
