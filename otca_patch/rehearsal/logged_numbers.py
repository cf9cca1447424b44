"""The numbers of upstream's ``wandb.log`` calls, copied to a JSON-lines file as each call is made.

wandb's offline run file cannot be read back reliably after a torchrun / ``accelerate launch`` run:
when every rank has exited, torch's elastic agent ends each worker's process group with SIGTERM, and
wandb's service (a child of rank 0, in its group) may be stopped before it has written the file. The
copy is written by rank 0 itself, line by line, before ``wandb.log`` runs: the values are those
upstream passed, every float bit kept (JSON writes ``repr``)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

FILE_NAME = "wandb_log.jsonl"


def as_number(value):
    """``value`` as a Python int or float when it is one number (a float, an int, a numpy scalar, a
    one-element tensor or array), else None (images, tables, strings, bools, many elements)."""
    if isinstance(value, (int, float)):
        return None if isinstance(value, bool) else value
    if not callable(getattr(value, "item", None)):
        return None
    try:
        item = value.item()
    except (ValueError, RuntimeError, TypeError):  # more than one element
        return None
    return item if isinstance(item, (int, float)) and not isinstance(item, bool) else None


def numbers_of(data: dict, prefix: str = "") -> dict:
    """The numbers of ``data``, nested dicts flattened with ``/`` as wandb names them."""
    found = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            found.update(numbers_of(value, f"{name}/"))
        elif (number := as_number(value)) is not None:
            found[name] = number
    return found


def copy_logged_numbers(path: Path) -> None:
    """From now on, each ``wandb.log(data, ...)`` in this process first appends ``numbers_of(data)`` to
    ``path`` as one line, then logs as before. ``wandb.init`` rebinds ``wandb.log`` to its run's ``log``,
    so the copy is made in ``Run.log``."""
    from wandb.sdk.wandb_run import Run

    log = Run.log
    if getattr(log, "copies_to", None) is not None:
        return

    @functools.wraps(log)
    def log_and_copy(self, data, *args, **kwargs):
        with open(path, "a") as copy:
            copy.write(json.dumps(numbers_of(data)) + "\n")
        return log(self, data, *args, **kwargs)

    log_and_copy.copies_to = str(path)
    Run.log = log_and_copy


def logged_history(folder: Path) -> list[dict]:
    """Every copied ``wandb.log`` call of the run whose folder is ``folder``, in order: {key: number}."""
    path = Path(folder) / FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the run's rank 0 never called wandb.log")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
