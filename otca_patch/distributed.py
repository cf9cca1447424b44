"""The few collective operations the layer needs: small per-sample tensors only, never latents.

Each one first makes sure the rank check ran (``rank_check.ensure``): the layer never enters a
collective before every rank is known to run the layer the same way."""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import rank_check


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``[B, ...]`` along dim 0 in rank order (all ranks have the same B)."""
    rank, size = world()
    if size == 1:
        return tensor
    rank_check.ensure()
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over ranks in place (after the rank check)."""
    rank_check.ensure()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def local_rows(tensor: torch.Tensor, batch: int) -> torch.Tensor:
    """This rank's rows of a gathered ``[world * B, ...]`` tensor."""
    rank, _ = world()
    return tensor[rank * batch:(rank + 1) * batch]
