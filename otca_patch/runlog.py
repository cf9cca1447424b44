"""The run log: one JSON line per training step and rank (``run_log.jsonl``)."""
from __future__ import annotations

import json
import math
import os

import torch

LOG_NAME = "run_log.jsonl"


def to_jsonable(value):
    """Tensors become (nested) lists of floats/ints; non-finite floats become None (valid JSON)."""
    if isinstance(value, torch.Tensor):
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
    """Appends records to ``<directory>/run_log.jsonl``; each record is one ``write`` of one line,
    with O_APPEND, so ranks sharing the file never interleave inside a line."""

    def __init__(self, directory: str):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, LOG_NAME)

    def write(self, record: dict) -> None:
        line = (json.dumps(to_jsonable(record), allow_nan=False) + "\n").encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)


def read_run_log(path: str) -> list[dict]:
    """Records of a run log; a truncated last line (a run killed mid-write) is skipped."""
    records = []
    with open(path) as handle:
        lines = handle.read().split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number >= len(lines) - 1:  # only the last line may be cut short
                continue
            raise ValueError(f"{path}:{number}: not a JSON record ({exc})") from None
    return records
