"""Upstream-saved checkpoints, as DanceGRPO's ``save_checkpoint`` writes them: a folder
``<output_dir>/checkpoint-<step>-<epoch>`` holding the FSDP full state dict of the transformer as
``diffusion_pytorch_model.safetensors`` and ``dict(transformer.config)`` (minus ``dtype``) as
``config.json`` (EMA copies: ``checkpoint-ema-<step>-<epoch>``, same layout)."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..files import atomic_write_json

WEIGHTS = "diffusion_pytorch_model.safetensors"
CONFIG = "config.json"
BASE = "base"  # --checkpoint base: the base model's own transformer, the table's reference row
#: wrapper prefixes FSDP / activation checkpointing can leave in state-dict keys
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "module.", "_orig_mod.")


@dataclass(frozen=True)
class Checkpoint:
    label: str
    folder: Path | None  # None: the base model's transformer

    @property
    def weights(self) -> Path | None:
        return None if self.folder is None else self.folder / WEIGHTS


def _step_order(folder: Path):
    numbers = [int(n) for n in re.findall(r"\d+", folder.name)]
    return (numbers, folder.name)


def find_checkpoints(arguments: list[str]) -> list[Checkpoint]:
    """``--checkpoint`` values: ``base``, a checkpoint folder, or an output_dir holding several
    (each ``checkpoint-*`` folder with weights, in step order)."""
    found = []
    for argument in arguments:
        if argument == BASE:
            found.append(Checkpoint(BASE, None))
            continue
        folder = Path(argument)
        if (folder / WEIGHTS).is_file():
            if not (folder / CONFIG).is_file():
                raise ValueError(f"{folder}: has {WEIGHTS} but no {CONFIG} (DanceGRPO writes both)")
            found.append(Checkpoint(folder.name, folder))
            continue
        if not folder.is_dir():
            raise ValueError(f"--checkpoint {argument}: no such folder")
        inside = sorted((p for p in folder.glob("checkpoint-*") if (p / WEIGHTS).is_file()), key=_step_order)
        if not inside:
            raise ValueError(f"--checkpoint {argument}: neither a checkpoint folder ({WEIGHTS} + {CONFIG}) "
                             f"nor an output_dir with checkpoint-*/ folders")
        found += [Checkpoint(p.name, p) for p in inside]
    labels = [c.label for c in found]
    if len(set(labels)) != len(labels):
        found = [Checkpoint(f"{c.folder.parent.name}/{c.label}" if c.folder else c.label, c.folder) for c in found]
    return found


def load_transformer(checkpoint: Checkpoint, dtype):
    """The checkpoint's transformer, built from its config.json and loaded strictly."""
    import torch
    from diffusers import FluxTransformer2DModel
    from safetensors.torch import load_file

    config_file = checkpoint.folder / CONFIG
    try:
        config = json.loads(config_file.read_text())
        config = {k: v for k, v in config.items() if not k.startswith("_")}
        model = FluxTransformer2DModel.from_config(config)
    except Exception as exc:  # unreadable, not JSON, not a FLUX transformer config
        raise ValueError(f"{config_file}: not a FLUX transformer config.json ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from exc
    try:
        weights = load_file(str(checkpoint.weights))
    except Exception as exc:  # truncated or corrupt safetensors (SafetensorError), unreadable file
        raise ValueError(f"{checkpoint.weights}: cannot be read as safetensors ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}); a checkpoint cut short by a killed save?") from exc
    state = {}
    for key, value in weights.items():
        for prefix in WRAPPER_PREFIXES:
            key = key.replace(prefix, "")
        state[key] = value
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{checkpoint.weights}: does not fit its config.json: missing {missing[:5]} "
                         f"({len(missing)}), unexpected {unexpected[:5]} ({len(unexpected)})")
    return model.to(dtype=dtype if dtype is not None else torch.float32).eval()


class FileHashes:
    """sha256 of big files, remembered by (size, mtime) in ``path`` so a resumed run does not re-read them."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.known = json.loads(path.read_text())
        except (OSError, ValueError):
            self.known = {}

    def __call__(self, file: Path) -> str:
        stat = file.stat()
        key = str(file.resolve())
        entry = self.known.get(key)
        if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
            return entry["sha256"]
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                digest.update(block)
        self.known[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest.hexdigest()}
        atomic_write_json(self.path, self.known, indent=1)
        return self.known[key]["sha256"]
