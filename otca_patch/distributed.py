"""The few collective operations the layer needs: small per-sample tensors only, never latents."""
from __future__ import annotations

import torch
import torch.distributed as dist


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
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)


def local_rows(tensor: torch.Tensor, batch: int) -> torch.Tensor:
    """This rank's rows of a gathered ``[world * B, ...]`` tensor."""
    rank, _ = world()
    return tensor[rank * batch:(rank + 1) * batch]
