"""The run log: one JSON line per training step and rank (``run_log.jsonl``)."""
from __future__ import annotations

import errno
import json
import math
import os
import sys

#: the run log's file name in ``--otca_log_dir`` (``otca-patch compare`` reads it: ``analysis.logs``)
LOG_NAME = "run_log.jsonl"


def to_jsonable(value):
    """Tensors become (nested) lists of floats/ints; non-finite floats become None (valid JSON)."""
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported: readers need no torch
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = value.tolist() if value.dim() else value.item()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLog:
    """Appends records to ``<directory>/run_log.jsonl``: whole records or none.

    Each record is one line written with O_APPEND (ranks sharing the file never interleave inside a
    line in practice). A short write is continued until the line is complete; a write that fails
    (full disk, quota) truncates the file back to where the record began, so readers never meet a
    half record, and raises ``OSError`` naming the log.
    """

    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, LOG_NAME)

    def write(self, record: dict) -> None:
        line = (json.dumps(to_jsonable(record), allow_nan=False) + "\n").encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.fstat(descriptor).st_size
            written = 0
            try:
                while written < len(line):
                    count = os.write(descriptor, line[written:])
                    if count <= 0:
                        raise OSError(errno.EIO, "the write made no progress")
                    written += count
            except OSError as exc:
                removed = self._truncate_back(descriptor, start, written)
                raise OSError(exc.errno, f"run log {self.path}: could not write a whole record "
                                         f"({exc.strerror or exc}); "
                              + ("the partial record was removed" if removed else
                                 "another process appended since, so the partial line stays (readers skip it)")) from exc
        finally:
            os.close(descriptor)

    @staticmethod
    def _truncate_back(descriptor: int, start: int, written: int) -> bool:
        """Remove this record's ``written`` bytes if nothing was appended after them."""
        if not written:
            return True
        try:
            if os.fstat(descriptor).st_size != start + written:
                return False
            os.ftruncate(descriptor, start)
            return True
        except OSError:
            return False
