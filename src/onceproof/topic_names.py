"""The names of the topics a run owns, and the guard that refuses any other (issue 28, design §4.4).

On a cluster onceproof owns (local, Docker) the prefix is empty and the names are the ones runs have
always used: ``input``, ``output``, ``output-progress``. On a cluster it does not own (``--backend
external``, later) the prefix is ``<topic_prefix><run id>-``, so a run creates and deletes only its own
topics; :class:`TopicGuard` is what create/delete will consult.

Kafka's legal topic names: ``[a-zA-Z0-9._-]``, at most 249 characters (``org.apache.kafka.common.
internals.Topic.validate``); names starting with ``__`` are Kafka's internal topics, so a prefix may not
start with ``_`` at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX_RE = re.compile(r"[A-Za-z0-9._-]+")
"""What a non-empty prefix matches (Kafka's topic-name characters)."""

MAX_TOPIC_LEN = 249
"""Kafka's limit on a topic name's length."""


class TopicNameError(ValueError):
    """A prefix that cannot make topic names, or a topic a run does not own."""


@dataclass(frozen=True)
class TopicNames:
    """The run's topics: ``prefix + "input"``, ``prefix + "output"``, ``prefix + "output-progress"``
    (the eos sink's progress topic, one partition).

    Raises (at construction): :class:`TopicNameError` for a prefix outside ``[A-Za-z0-9._-]+``, one
    starting with ``_``, or one making a name longer than 249 characters. ``""`` is allowed (today's
    names, on clusters onceproof owns).
    """

    prefix: str = ""

    def __post_init__(self) -> None:
        p = self.prefix
        if p and not PREFIX_RE.fullmatch(p):
            raise TopicNameError(f"topic prefix {p!r}: only letters, digits, '.', '_' and '-' (Kafka's topic names)")
        if p.startswith("_"):
            raise TopicNameError(f"topic prefix {p!r}: may not start with '_' (Kafka's internal topics do)")
        if len(p + "output-progress") > MAX_TOPIC_LEN:
            raise TopicNameError(f"topic prefix {p[:20]!r}...: names would exceed {MAX_TOPIC_LEN} characters")

    @property
    def input(self) -> str:
        """The workload writes it, the pipeline reads it."""
        return f"{self.prefix}input"

    @property
    def output(self) -> str:
        """The pipeline's Kafka sinks write it; the checker reads it."""
        return f"{self.prefix}output"

    @property
    def progress(self) -> str:
        """The eos sink's progress topic (one partition)."""
        return f"{self.prefix}output-progress"

    def all(self) -> tuple[str, ...]:
        """``(input, output, progress)``."""
        return (self.input, self.output, self.progress)


@dataclass(frozen=True)
class TopicGuard:
    """Refuses any topic outside ``names`` (for create, delete and describe on a cluster onceproof does
    not own; not yet consulted by ``clients/topics``)."""

    names: TopicNames

    def allows(self, name: str) -> bool:
        """Whether ``name`` is one of the run's topics."""
        return name in self.names.all()

    def check(self, name: str) -> str:
        """``name`` when it is one of the run's topics. Raises: :class:`TopicNameError` naming it and
        the run's topics."""
        if not self.allows(name):
            raise TopicNameError(f"topic {name!r} is not this run's (its topics: {', '.join(self.names.all())}); "
                                 "onceproof creates and deletes only its own topics")
        return name
