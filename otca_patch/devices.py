"""Which device a rank's registry reward models live on (``--otca_reward_device``).

Every rank gets the same flags, so a device that means one GPU per rank must be written per rank:
``cuda:local`` (or plain ``cuda``) is ``cuda:{LOCAL_RANK}``, the GPU that DanceGRPO's trainers select
with ``torch.cuda.set_device(local_rank)`` and torchrun / accelerate name in ``LOCAL_RANK``. The layer
installs before upstream sets its device, when a bare ``cuda`` would still mean GPU 0 on every rank.
"""
from __future__ import annotations

import os
from typing import Optional, Union

import torch

#: the per-rank forms of ``--otca_reward_device`` (the rank's own GPU)
PER_RANK = ("cuda:local", "cuda")


def local_rank() -> int:
    """This process's GPU slot on its node: ``$LOCAL_RANK`` (0 without a launcher)."""
    text = os.environ.get("LOCAL_RANK", "0") or "0"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"LOCAL_RANK={text!r} is not an integer") from None


def rank_cuda_device() -> torch.device:
    """``cuda:{LOCAL_RANK}``, checked against the GPUs this process sees."""
    index, count = local_rank(), torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"--otca_reward_device: LOCAL_RANK={index} but this process sees {count} CUDA "
                         f"device(s); give an explicit --otca_reward_device cuda:N or cpu")
    return torch.device("cuda", index)


def follows_trainer(flag: str) -> bool:
    """Whether the models follow the trainer's device (no flag, or a per-rank form) rather than a pinned one."""
    return flag in ("",) + PER_RANK


def reward_device(flag: str, trainer_device: Optional[Union[str, torch.device]] = None) -> torch.device:
    """The device registry models load on.

    flag: ``--otca_reward_device``: empty (the trainer's device), ``cuda:local`` / ``cuda`` (this
    rank's GPU), or an explicit device (``cpu``, ``cuda:1``). trainer_device: the device upstream
    trains on when it is known already (FlowGRPO's ``accelerator.device``); without one, this rank's
    GPU when CUDA is available, else the CPU.
    """
    if flag in PER_RANK:
        if not torch.cuda.is_available():
            raise ValueError(f"--otca_reward_device {flag}: no CUDA device is available here")
        return rank_cuda_device()
    if flag:
        try:
            device = torch.device(flag)
        except RuntimeError as exc:
            raise ValueError(f"--otca_reward_device {flag!r}: not a device ({exc}); use cpu, cuda:N or "
                             f"cuda:local (each rank's own GPU)") from None
        return device
    if trainer_device is not None:
        device = torch.device(trainer_device)
        return rank_cuda_device() if device.type == "cuda" and device.index is None else device
    return rank_cuda_device() if torch.cuda.is_available() else torch.device("cpu")
