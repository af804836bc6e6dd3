"""What the transactional sink hands to ``produce()``: PySpark 3.5 gives a binary column's value as a
``bytearray``, which confluent-kafka refuses; the sink turns it into ``bytes`` (4.x already gives bytes)."""

import pytest
from confluent_kafka import Producer

from onceproof.pipeline.transactional_sink import _bytes


def test_a_bytearray_value_is_produced_as_bytes_and_others_pass_unchanged():
    prod = Producer({"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 1})  # queued only, never sent
    with pytest.raises(TypeError, match="read-only bytes-like"):
        prod.produce("t", key=b"k", value=bytearray(b"v"))
    prod.produce("t", key=_bytes(bytearray(b"k")), value=_bytes(bytearray(b"v")))
    assert _bytes(bytearray(b"v")) == b"v" and type(_bytes(bytearray(b"v"))) is bytes
    assert _bytes(b"v") == b"v" and _bytes("k") == "k" and _bytes(None) is None
    prod.purge()
