"""``onceproof faults``: the fault catalogue (``nemesis/catalog.py``), one entry per fault."""

from __future__ import annotations

import re
import sys
import textwrap

import typer

from onceproof.backends import capabilities, registry
from onceproof.backends.base import can_perform
from onceproof.backends.common import netem, tmpfs
from onceproof.harness.cli.app import console
from onceproof.nemesis import catalog


def backends_of(name: str) -> list[str]:
    """The backends (``backends/registry.py``) that can perform fault ``name``: all of its targets, or
    ``name (targets...)`` for some of them. The backend classes are imported, none is started."""
    out = []
    for b in registry.names():
        caps = capabilities.of_class(registry.backend_class(b))
        specs = catalog.expand(name)
        able = [s for s in specs if can_perform(caps, s)]
        if len(able) == len(specs):
            out.append(b)
        elif able:
            out.append(f"{b} ({', '.join(s.partition(':')[2] for s in able)})")
    return out


ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.", "etc.", "approx.", "resp.", "incl.")
"""Words whose period does not end a sentence (``etc.`` does when a capital letter follows)."""


def first_paragraph(doc: str) -> str:
    """The first paragraph of a docstring (up to its first blank line), its lines joined into one."""
    para = re.split(r"\n\s*\n", (doc or "").strip(), maxsplit=1)[0]
    return " ".join(para.split())


def first_sentence(doc: str) -> str:
    """The whole first sentence of a docstring's first paragraph, whatever its line breaks: a ``.``, ``?``
    or ``!`` followed by a space ends it, but not inside parentheses or ````code````, nor after an
    abbreviation (``e.g.``) or before a lowercase word. A paragraph with no such end is returned whole."""
    text = first_paragraph(doc)
    depth, code, i = 0, False, 0
    while i < len(text):
        c = text[i]
        if text.startswith("``", i):
            code, i = not code, i + 2
            continue
        if not code:
            if c == "(":
                depth += 1
            elif c == ")":
                depth = max(depth - 1, 0)
                # "(... it ends here.) Next": the sentence ended inside the parentheses
                if depth == 0 and text[i - 1:i] in (".", "?", "!") and _ends_at(text, i, check_word=False):
                    return text[:i + 1]
            elif c in ".?!" and depth == 0 and _ends_at(text, i, check_word=c == "."):
                return text[:i + 1]
        i += 1
    return text


def _ends_at(text: str, i: int, check_word: bool) -> bool:
    """Whether the mark at ``text[i]`` ends a sentence: the text ends there, or a space and no lowercase
    word follow, and (for a period) the word it closes is no abbreviation."""
    rest = text[i + 1:]
    if not rest:
        return True
    if not rest[0].isspace() or rest.lstrip()[:1].islower():
        return False
    if check_word:
        word = text[:i + 1].rsplit(" ", 1)[-1].lstrip("(").lower()
        if word in ABBREVIATIONS and not (word == "etc." and rest.lstrip()[:1].isupper()):
            return False
    return True


def description(name: str, long: bool = False) -> str:
    """What fault ``name`` does, from its class's docstring (or its module's): the first sentence, or
    with ``long`` the whole first paragraph; without the module docstring's leading ````name````: ."""
    cls = catalog.FAULTS[name]
    doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().removeprefix(f"``{name}``: ")
    text = first_paragraph(doc) if long else first_sentence(doc)
    return text[:1].upper() + text[1:]


def faults(long: bool = typer.Option(False, "--long", help="print each fault's whole paragraph, not only its "
                                                             "first sentence")) -> None:
    """List the faults, their targets, the backends that can perform them and what each one does."""
    for name, cls in catalog.FAULTS.items():
        targets = ", ".join(getattr(cls, "target_choices", ())) or "-"
        where = ", ".join(backends_of(name)) or "none"
        console.print(f"[bold]{name}[/]  targets: {targets}  backends: {where}")
        console.print(textwrap.fill(description(name, long), width=max(console.width, 40), initial_indent="  ",
                                    subsequent_indent="  ", break_on_hyphens=False), markup=False, soft_wrap=True)
        if name in catalog.LOSSY:  # said here, detected now: netem's delay/reorder/duplicate are no target
            console.print(f"  netem delay/reorder/duplicate: not offered: {netem.unavailable()}", soft_wrap=True)
        if catalog.needs_small_disks([name]):  # said here, probed now: the brokers' tmpfs needs mount privileges
            why = tmpfs.unavailable()
            console.print(f"  size-limited broker disks (tmpfs): {'available here' if why is None else why}",
                          soft_wrap=True)
