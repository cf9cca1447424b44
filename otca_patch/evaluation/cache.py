"""Per-prompt results of one checkpoint on one prompt set, so an interrupted evaluation resumes.

A cache folder is named by a hash of everything that decides the numbers (the checkpoint file's
sha256, the base model, the prompts, seed and sampling settings, the reward models); each prompt's
entry is ``<index>.json`` (written last, atomically: its presence means the entry is complete) and
``<index>.png`` (the image it scored). Delete an entry and the next run recomputes just that prompt.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from ..files import atomic_path, atomic_write_text, remove_stale_temporaries


def cache_key(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def folder_fingerprint(folder: Path) -> list:
    """(relative path, size) of every file under ``folder``: a base model that changed is noticed
    without hashing tens of gigabytes; moving the folder does not invalidate the cache."""
    return sorted([str(p.relative_to(folder)), p.stat().st_size] for p in folder.rglob("*") if p.is_file())


class EntryCache:
    def __init__(self, folder: Path, settings: dict):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        stale = remove_stale_temporaries(folder)  # left by a run killed mid-write; never an entry
        if stale:
            print(f"otca-patch eval: removed {len(stale)} unfinished temporary file(s) in {folder}", file=sys.stderr)
        settings_file = folder / "settings.json"
        if not settings_file.exists():
            atomic_write_text(settings_file, json.dumps(settings, indent=1, sort_keys=True, default=str))

    def _json(self, index: int) -> Path:
        return self.folder / f"{index:05d}.json"

    def get(self, index: int) -> dict | None:
        try:
            return json.loads(self._json(index).read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # cannot happen with atomic writes; a hand-edited file is recomputed
            return None

    def image(self, index: int) -> Path:
        """Where the image of prompt ``index`` is (absent when its entry was computed without one)."""
        return self.folder / f"{index:05d}.png"

    def put(self, index: int, entry: dict, image) -> None:
        if image is not None:
            with atomic_path(self.image(index)) as tmp:
                image.save(tmp, format="PNG")
        atomic_write_text(self._json(index), json.dumps(entry))
