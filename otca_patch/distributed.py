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


class _Rows:
    checked = False  # every rank's B compared once per process (the first gather)


def gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``[B, ...]`` along dim 0 in rank order (all ranks have the same B:
    checked at the first call, a ``RankError`` naming the ranks and their sizes otherwise)."""
    rank, size = world()
    if size == 1:
        return tensor
    rank_check.ensure()
    if not _Rows.checked:
        _check_equal_rows(tensor.shape[0], tensor.device, size)
        _Rows.checked = True
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)


def _check_equal_rows(batch: int, device: torch.device, size: int) -> None:
    """Every rank's B, gathered (one tiny collective that every patched rank makes at its first gather)."""
    parts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(size)]
    dist.all_gather(parts, torch.tensor([batch], dtype=torch.int64, device=device))
    sizes = [int(p.item()) for p in parts]
    if len(set(sizes)) > 1:
        by_size: dict = {}
        for r, b in enumerate(sizes):
            by_size.setdefault(b, []).append(str(r))
        listed = "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}: {b} rows"
                           for b, ranks in by_size.items())
        raise rank_check.RankError(
            f"the ranks hold different numbers of samples ({listed}); the layer's credit gathers every "
            f"rank's rows and needs the same batch size B on each (upstream's drop_last samplers and fixed "
            f"best-of-n counts give it; a dataset or sampler change that breaks it would mix up rows)")


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over ranks in place (after the rank check)."""
    rank_check.ensure()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def local_rows(tensor: torch.Tensor, batch: int) -> torch.Tensor:
    """This rank's rows of a gathered ``[world * B, ...]`` tensor."""
    rank, _ = world()
    return tensor[rank * batch:(rank + 1) * batch]
