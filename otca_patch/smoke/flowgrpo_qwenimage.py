"""What FlowGRPO's Qwen-Image trainers (``scripts/train_qwenimage*.py``, 9745241) need to run on the
CPU under ``torchrun`` through upstream's own FSDP path (``flow_grpo/fsdp_utils.py``:
``init_distributed``, ``fsdp_wrapper`` around the transformer and the text encoder,
``save_fsdp_checkpoint``); the family's smoke (``flowgrpo``, model ``qwenimage``) runs them. Needs a
transformers release with Qwen2.5-VL (4.49+).

CPU stand-ins, installed in the smoke process only (``cpu_fsdp``): upstream's ``init_distributed``
calls ``torch.cuda.set_device`` and starts an NCCL group, and ``fsdp_wrapper`` passes
``device_id=rank % torch.cuda.device_count()``; on the CPU ``set_device`` does nothing, the group
is gloo, and that device id is the CPU. Everything else in those functions runs as written.
"""
from __future__ import annotations

import functools
import sys

import torch

from .environment import smoke_device


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
