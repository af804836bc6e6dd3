"""``ONCEPROOF_KAFKA_VERSION`` (backends/common/jars.py): another broker version than the pin, checked before Maven
is asked for it. No Maven run here."""

from __future__ import annotations

import pytest

from onceproof.backends.common import jars


def test_the_pin_unless_the_variable_names_another_version(monkeypatch):
    monkeypatch.delenv(jars.KAFKA_VERSION_ENV, raising=False)
    pinned = jars.kafka_version()
    assert pinned.count(".") == 2 and pinned.split(".")[0].isdigit()
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, " 3.5.2 ")
    assert jars.kafka_version() == "3.5.2"
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, "")
    assert jars.kafka_version() == pinned


@pytest.mark.parametrize("bad", ["latest", "3.x", "3.5.2; rm -rf /", "-Dfoo=1"])
def test_a_value_that_is_not_a_version_names_the_fix(monkeypatch, bad):
    monkeypatch.setenv(jars.KAFKA_VERSION_ENV, bad)
    with pytest.raises(jars.ResolveError, match="unset it to use the pinned one"):
        jars.kafka_version()
