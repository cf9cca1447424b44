"""Reading an upstream file as Python reads it, and its identity (sha256)."""
from __future__ import annotations

import hashlib
import tokenize


def read_source(path: str) -> str:
    """The file's text, honouring a PEP 263 encoding line as Python itself would."""
    with tokenize.open(path) as handle:
        return handle.read()


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()
