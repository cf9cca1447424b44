"""Run FlowGRPO's real ``scripts/train_qwenimage.py`` ``main()`` (9745241) on the CPU with a tiny
Qwen-Image (``tiny_qwenimage``) under ``torchrun`` on two processes, through upstream's own FSDP path
(``flow_grpo/fsdp_utils.py``: ``init_distributed``, ``fsdp_wrapper`` around the transformer and the
text encoder, ``save_fsdp_checkpoint``). Needs a transformers release with Qwen2.5-VL (4.49+).

CPU stand-ins, installed in the smoke process only (``cpu_fsdp``): upstream's ``init_distributed``
calls ``torch.cuda.set_device`` and starts an NCCL group, and ``fsdp_wrapper`` passes
``device_id=rank % torch.cuda.device_count()``; on the CPU ``set_device`` does nothing, the group
is gloo, and that device id is the CPU. Everything else in those functions runs as written.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import torch

from . import qwen_transformers
from .environment import smoke_device
from .flowgrpo import FlowSizes, FlowTrainer, FsdpProbe
from .tiny_qwenimage import build_tiny_qwenimage


@dataclass
class Sizes(FlowSizes):
    """The SDE window: ``sde_window_size`` steps starting in ``0 .. sde_window_end - size`` (the
    sampler seeds its draw with the process index, 0: the same window every call)."""

    sde_window_size: int = 2
    sde_window_end: int = 4


def overrides(sizes: Sizes) -> dict:
    return {"sample.sde_window_size": sizes.sde_window_size, "sample.sde_window_range": (0, sizes.sde_window_end),
            "activation_checkpointing": False, "fsdp_optimizer_offload": False}


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


TRAINER = FlowTrainer("scripts/train_qwenimage.py", "train_qwenimage", build_tiny_qwenimage,
                      "OTCA_TINY_QWENIMAGE_DIR", overrides=overrides, probe=FsdpProbe, prepare=cpu_fsdp,
                      needs_torchrun=True, launch="under torchrun, as upstream launches it: torchrun --nproc_per_node 2 "
                                                  "-m otca_patch.smoke ... (it starts its own process group and FSDP)")
run = TRAINER.run
before_imports = qwen_transformers.use  # Qwen2.5-VL: a newer transformers than the environment's, when it has one
