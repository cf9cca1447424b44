"""``--help`` in plain text: the module docstrings and field docs that become help are written in
reStructuredText (````name````, ``:func:`x```), which a terminal shows raw; every command's help
goes through ``plain_text`` (argparse's through the formatters below)."""
from __future__ import annotations

import argparse
import re
import textwrap

_LITERAL = re.compile(r"``(.+?)``", re.S)
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")


def plain_text(text: str) -> str:
    """``text`` without reStructuredText's inline markup: ````x```` and ``:role:`x``` become ``x``."""
    return _ROLE.sub(r"\1", _LITERAL.sub(r"\1", text))


class _ListWrapper(textwrap.TextWrapper):
    """Wraps at spaces and after the commas of a comma-separated list (``multi_grpo,sum_raw,...``), so
    a list of names breaks between names, never inside one."""

    wordsep_simple_re = re.compile(r"(\s+|(?<=,)(?=[^\s,]))")


class _Plain:
    def _format_text(self, text):
        return super()._format_text(plain_text(text))

    def _expand_help(self, action):
        return plain_text(super()._expand_help(action))

    def _split_lines(self, text, width):
        return _ListWrapper(width, break_on_hyphens=False).wrap(self._whitespace_matcher.sub(" ", text).strip())


class PlainHelpFormatter(_Plain, argparse.HelpFormatter):
    """argparse's default layout (paragraphs re-wrapped), without the markup."""


class PlainDescriptionFormatter(_Plain, argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written (their line breaks kept), without the markup."""
