"""File primitives every part of otca-patch uses: the one atomic write (a file is either the old
one or the new one, never half written) and the one JSONL reader (records with their line numbers;
a bad line is skipped with a warning naming file and line, never a reason to lose the rest)."""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from . import env_names

#: suffix of every temporary file an atomic write leaves behind when the process is killed mid-write
TMP_SUFFIX = ".tmp"


@contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path`` (``.<name>.XXXX.tmp``); when the block succeeds it
    replaces ``path`` in one step, otherwise it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_bytes(path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, data, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


def remove_stale_temporaries(folder) -> list[Path]:
    """Delete the temporary files killed atomic writes left in ``folder``; returns them."""
    folder = Path(folder)
    stale = sorted(folder.glob(f"*{TMP_SUFFIX}")) if folder.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def read_jsonl(path) -> tuple[list[tuple[int, dict]], list[str]]:
    """``(line number, record)`` for every line of ``path`` that is a JSON object, and one warning
    (``file:line: ...``) for every other non-blank line, which is skipped: a record cut short by a
    killed run or a full disk must not make the rest of the log unreadable."""
    path = Path(path)
    records, warnings = [], []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                cut = "" if line.endswith("\n") else " (the last line, cut short: a run killed mid-write?)"
                warnings.append(f"{path}:{number}: not a JSON record ({exc.msg}, column {exc.colno}){cut}; skipped it")
                continue
            except RecursionError:  # nested deeper than Python's parser recurses: no record the layer writes
                warnings.append(f"{path}:{number}: not a run record (JSON nested too deeply to read); skipped it")
                continue
            if not isinstance(record, dict):
                warnings.append(f"{path}:{number}: a record must be a JSON object, got {type(record).__name__}; "
                                f"skipped it")
                continue
            records.append((number, record))
    return records, warnings


def shown_path(path) -> str:
    """``path`` as printed to the user: relative to the folder the command was started in (``$OTCA_STARTED_IN``,
    else the current one) when it lies inside it, else absolute."""
    path = os.path.abspath(path)
    start = os.environ.get(env_names.STARTED_IN) or os.getcwd()  # a smoke run works in its output folder
    relative = os.path.relpath(path, start)
    return path if relative == ".." or relative.startswith(".." + os.sep) else relative
