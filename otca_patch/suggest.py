"""Near-miss suggestions for names a user types (flags, spec names, reward names)."""
from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the closest of ``choices`` to ``word``, or ``""`` when none is close."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
