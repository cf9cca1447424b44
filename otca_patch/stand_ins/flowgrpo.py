"""What FlowGRPO's trainers (9745241) need on the CPU beyond the common stand-ins.

- Qwen-Image's trainers (``scripts/train_qwenimage*.py``) run under ``torchrun`` through upstream's own
  FSDP path (``flow_grpo/fsdp_utils.py``: ``init_distributed``, ``fsdp_wrapper``, ``save_fsdp_checkpoint``).
  Upstream's ``init_distributed`` calls ``torch.cuda.set_device`` and starts an NCCL group, and
  ``fsdp_wrapper`` passes ``device_id=rank % torch.cuda.device_count()``; ``cpu_fsdp`` makes
  ``set_device`` do nothing, the group gloo, and that device id the CPU. The rest runs as written.
- Wan2.1's reward ``video_ocr`` runs as written (frame sampling, Levenshtein distance, per-video mean)
  except PaddleOCR's engine, which downloads its weights from Baidu's servers when built and needs
  paddlepaddle: ``stand_in_paddleocr`` gives ``StandInOcr``, which reads one word per frame, chosen by
  the frame's pixels.
"""
from __future__ import annotations

import functools
import hashlib
import sys
import types

import torch

from .cpu import smoke_device


def cpu_fsdp(module) -> None:
    """Upstream's process group and FSDP wrapping on the CPU (see the module docstring)."""
    if smoke_device().type != "cpu":
        return
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel

    fsdp_utils = sys.modules["flow_grpo.fsdp_utils"]
    init_process_group = dist.init_process_group

    class CpuFSDP(FullyShardedDataParallel):
        def __init__(self, model, *args, device_id=None, **kwargs):
            super().__init__(model, *args, device_id=torch.device("cpu"), **kwargs)

    def gloo_group(*args, backend=None, **kwargs):
        return init_process_group(*args, backend="gloo", **kwargs)

    wrapper = module.fsdp_wrapper

    @functools.wraps(wrapper)
    def wrap_on_cpu(*args, **kwargs):
        count = torch.cuda.device_count
        torch.cuda.device_count = lambda: 1  # rank % 1: the one device, the CPU (CpuFSDP)
        try:
            return wrapper(*args, **kwargs)
        finally:
            torch.cuda.device_count = count

    torch.cuda.set_device = lambda device: None
    dist.init_process_group = gloo_group
    fsdp_utils.FSDP = CpuFSDP
    module.fsdp_wrapper = wrap_on_cpu


#: what the stand-in reader can read (the quoted words of the smoke's OCR prompts among them)
OCR_WORDS = ("cat", "car", "cap", "dog", "sea", "star")


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
