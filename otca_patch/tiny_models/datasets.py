"""Tiny datasets in FlowGRPO's layouts, written from the tiny prompts, and a tiny folder built once
for several processes (the first local process builds it; the others wait for it)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..files import atomic_write_text
from .text import IMAGE_PROMPTS as PROMPTS

#: the OCR prompts of Wan2.1's ``general_ocr`` dataset: a quoted word each, one the stand-in reader can read
OCR_PROMPTS = ('a photo of "cat" on a white background', 'a photo of "dog" in the snow',
               'a photo of "star" at night', 'a photo of "sea" over the sea')


def write_prompt_lists(folder: Path) -> None:
    """``train.txt`` / ``test.txt``: the prompt lists of upstream's ``general_ocr`` dataset."""
    atomic_write_text(folder / "train.txt", "\n".join(PROMPTS) + "\n")
    atomic_write_text(folder / "test.txt", "\n".join(PROMPTS[:2]) + "\n")


def write_ocr_prompts(folder: Path) -> None:
    """``train.txt`` / ``test.txt`` of upstream's ``general_ocr`` dataset (``dataset/ocr``): a quoted text each."""
    atomic_write_text(folder / "train.txt", "\n".join(OCR_PROMPTS) + "\n")
    atomic_write_text(folder / "test.txt", "\n".join(OCR_PROMPTS[:2]) + "\n")


def write_edit_dataset(folder: Path, resolution: int = 32) -> None:
    """Upstream's image-editing layout (``{split}_metadata.jsonl``, a prompt and an input image per
    line): an input image per prompt (flat colours, deterministic), one distinct edit prompt each, so
    upstream's groups (prompt and image path) are the prompts' groups."""
    import numpy as np
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


def built_once(folder: Path, build_model) -> Path:
    """The tiny pipeline folder, built by the first local process; the others wait for it."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        if not (folder / "model_index.json").is_file():
            folder.parent.mkdir(parents=True, exist_ok=True)
            partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
            build_model(partial)
            os.replace(partial, folder)
        return folder
    deadline = time.time() + 600
    while not (folder / "model_index.json").is_file():
        if time.time() > deadline:
            raise SystemExit(f"{folder} was not built by the first process")
        time.sleep(0.5)
    return folder
