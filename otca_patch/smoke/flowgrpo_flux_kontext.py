"""Run FlowGRPO's real ``scripts/train_flux_kontext.py`` ``main()`` (9745241) on the CPU with a tiny
FLUX-Kontext (the tiny FLUX of ``tiny_flux`` saved as a ``FluxKontextPipeline``) under ``accelerate
launch`` on two processes (gloo). Its dataset is upstream's image-editing layout
(``{split}_metadata.jsonl`` with a prompt and an input image per line): one distinct edit prompt
per input image, so upstream's groups (prompt and image path) are the prompts' groups."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..files import atomic_write_text
from .flowgrpo import ACCELERATE_DDP, PROMPTS, FlowSizes, FlowTrainer
from .tiny_flux import build_tiny_flux


@dataclass
class Sizes(FlowSizes):
    """Kontext trains T = int(S * timestep_fraction) steps, in order, as FLUX."""


def build_tiny_kontext(folder: Path) -> Path:
    """The tiny FLUX folder, declared a ``FluxKontextPipeline`` (the same components: Kontext feeds
    the input image's packed latents to the same transformer, after the noisy ones)."""
    build_tiny_flux(folder)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "_class_name": "FluxKontextPipeline"}, indent=2))
    return folder


def write_edit_dataset(folder: Path, resolution: int = 32) -> None:
    """An input image per prompt (flat colours, deterministic) and the metadata lines upstream reads."""
    from PIL import Image

    (folder / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for index, prompt in enumerate(PROMPTS):
        colour = np.array([(60 * index) % 256, (120 + 50 * index) % 256, (200 - 40 * index) % 256], dtype=np.uint8)
        path = folder / "images" / f"input_{index}.png"
        if not path.is_file():  # written whole, then moved: the other process may read it at once
            partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.png")
            Image.fromarray(np.broadcast_to(colour, (resolution, resolution, 3)).copy()).save(partial)
            os.replace(partial, path)
        lines.append(json.dumps({"prompt": prompt, "image": f"images/input_{index}.png"}))
    atomic_write_text(folder / "train_metadata.jsonl", "\n".join(lines) + "\n")
    atomic_write_text(folder / "test_metadata.jsonl", "\n".join(lines[:2]) + "\n")


TRAINER = FlowTrainer("scripts/train_flux_kontext.py", "train_flux_kontext", build_tiny_kontext,
                      "OTCA_TINY_FLUX_KONTEXT_DIR", write_dataset=write_edit_dataset, **ACCELERATE_DDP)
run = TRAINER.run
