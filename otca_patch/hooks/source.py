"""Reading an upstream file as Python reads it, its identity (sha256), and its syntax tree, parsed
once per content: selecting the spec, the rewrite and the identity line of one launch share it."""
from __future__ import annotations

import ast
import hashlib
import io
import os
import pickle
import tokenize
from dataclasses import dataclass

#: the parsed trees, by (absolute path, sha256 of the bytes): a few files per process
_TREES: dict[tuple[str, str], bytes | SyntaxError] = {}
_KEPT = 16


def read_source(path: str) -> str:
    """The file's text, honouring a PEP 263 encoding line as Python itself would."""
    with tokenize.open(path) as handle:
        return handle.read()


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


@dataclass(frozen=True)
class UpstreamFile:
    """One read of an upstream file: its absolute ``path``, its ``text`` (decoded as ``read_source``
    decodes it) and the ``sha256`` of the bytes read, so that everything said of it is said of the
    same content."""

    path: str
    text: str
    sha256: str

    def tree(self) -> ast.Module:
        """The file's syntax tree, a copy of one parse per content (the rewrite changes the tree it
        is given); ``SyntaxError`` when it does not parse."""
        key = (self.path, self.sha256)
        parsed = _TREES.get(key)
        if parsed is None:
            try:
                parsed = pickle.dumps(ast.parse(self.text, filename=self.path), protocol=pickle.HIGHEST_PROTOCOL)
            except SyntaxError as exc:
                parsed = exc
            while len(_TREES) >= _KEPT:
                del _TREES[next(iter(_TREES))]
            _TREES[key] = parsed
        if isinstance(parsed, SyntaxError):
            raise parsed
        return pickle.loads(parsed)  # a copy: cheaper than parsing again


def upstream_file(path: str | os.PathLike) -> UpstreamFile:
    """``path`` read once (see ``UpstreamFile``)."""
    path = os.path.abspath(path)
    with open(path, "rb") as handle:
        data = handle.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    # as tokenize.open reads it: universal newlines
    text = io.TextIOWrapper(io.BytesIO(data), encoding, line_buffering=True).read()
    return UpstreamFile(path, text, hashlib.sha256(data).hexdigest())
