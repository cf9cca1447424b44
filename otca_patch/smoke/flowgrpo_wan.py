"""What FlowGRPO's ``scripts/train_wan2_1.py`` (9745241) needs to run on the CPU with a tiny Wan2.1
(``tiny_wan``: diffusers' ``WanPipeline`` layout, random weights): the family's smoke (``flowgrpo``,
model ``wan``) runs it, a few frames, under ``accelerate launch`` (gloo) on one process as upstream's
README launches it, or more; its spec's ``[target.smoke]`` gives the config keys of
``general_ocr_wan2_1`` made tiny.

Upstream's reward is ``multi_score`` with the config's ``video_ocr`` (``general_ocr_wan2_1``), the
one reward of ``multi_score`` that scores videos. It runs as written (frame sampling, Levenshtein
distance, per-video mean) except PaddleOCR's engine: ``paddleocr.PaddleOCR`` downloads its detection
and recognition weights from Baidu's servers when built and needs paddlepaddle, so the smoke process
gets a stand-in reader (``StandInOcr``) that reads one word per frame, chosen by the frame's pixels.
The first two epochs sample nothing (upstream's ``if epoch < 2: continue``): a run of N epochs is
N trained epochs after those two.
"""
from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

from ..files import atomic_write_text

#: upstream's main trains from epoch 2 (its first two epochs only draw prompts)
UNTRAINED_EPOCHS = 2
#: the quoted words of the OCR prompts, and what the stand-in reader can read
OCR_WORDS = ("cat", "car", "cap", "dog", "sea", "star")
OCR_PROMPTS = ('a photo of "cat" on a white background', 'a photo of "dog" in the snow',
               'a photo of "star" at night', 'a photo of "sea" over the sea')


class StandInOcr:
    """``paddleocr.PaddleOCR`` in the smoke process: ``ocr(frame)`` reads one of ``OCR_WORDS``, picked
    by a digest of the frame's pixels, with confidence 1, in PaddleOCR's result layout."""

    def __init__(self, **options):
        self.options = options

    def ocr(self, frame, cls=False):
        digest = int(hashlib.sha256(frame.tobytes()).hexdigest(), 16)
        return [[[[[0, 0], [1, 0], [1, 1], [0, 1]], (OCR_WORDS[digest % len(OCR_WORDS)], 1.0)]]]


def stand_in_paddleocr(module) -> None:
    """Before ``main`` builds its reward: ``flow_grpo/ocr.py``'s ``from paddleocr import PaddleOCR`` gets ``StandInOcr``."""
    sys.modules["paddleocr"] = types.SimpleNamespace(PaddleOCR=StandInOcr)


def write_ocr_prompts(folder: Path) -> None:
    """``train.txt`` / ``test.txt`` of upstream's ``general_ocr`` dataset (``dataset/ocr``): a quoted text each."""
    atomic_write_text(folder / "train.txt", "\n".join(OCR_PROMPTS) + "\n")
    atomic_write_text(folder / "test.txt", "\n".join(OCR_PROMPTS[:2]) + "\n")
