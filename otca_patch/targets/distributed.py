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


#: DDP's default bucket size (``bucket_cap_mb=25``): the most extra memory the gradient average takes
GRADIENT_BUCKET_BYTES = 25 * 1024 * 1024


def average_gradients(parameters, bucket_bytes: int = GRADIENT_BUCKET_BYTES) -> int:
    """Every trainable parameter's gradient becomes its mean over ranks, the same on every rank (DDP's
    semantics). Returns the number of gradients averaged.

    A parameter that some rank gave a gradient and another did not (a Wan2.2 expert that one rank's
    accumulation window never reached) counts as a zero gradient there, so each gradient is its own
    mean: the ranks first agree, with one small collective, on which parameters hold a gradient
    anywhere (``[P]`` flags). A parameter without a gradient on every rank keeps ``None``, as DDP
    leaves it. The gradients travel in buckets of at most ``bucket_bytes`` per dtype and device
    (one bucket's copy of extra memory, not a copy of every gradient); every rank builds the same
    buckets, since they follow the parameter order and the agreed flags."""
    _, size = world()
    params = [p for p in parameters if p.requires_grad]
    if size == 1 or not params:
        return 0
    device = next((p.grad.device for p in params if p.grad is not None), params[0].device)
    held = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    all_reduce_sum(held)  # on every rank: how many ranks hold each gradient
    anywhere = [p for p, count in zip(params, held.tolist()) if count > 0]  # one host read, outside any loop
    for p in anywhere:
        if p.grad is None:
            p.grad = torch.zeros_like(p)  # this rank's contribution to the mean: nothing
    open_buckets: dict = {}  # (dtype, device) -> (gradients, bytes) of the bucket being filled
    for p in anywhere:
        key, nbytes = (p.grad.dtype, p.grad.device), p.grad.numel() * p.grad.element_size()
        grads, filled = open_buckets.get(key, ([], 0))
        if grads and filled + nbytes > bucket_bytes:
            _average_bucket(grads, size)
            grads, filled = [], 0
        open_buckets[key] = (grads + [p.grad], filled + nbytes)
    for grads, _ in open_buckets.values():
        _average_bucket(grads, size)
    return len(anywhere)


def _average_bucket(grads: list, size: int) -> None:
    """One all-reduce for ``grads`` (same dtype and device), divided by the world size first as DDP
    does (no overflow in half precision), copied back in place."""
    if len(grads) == 1 and grads[0].is_contiguous():
        grads[0].div_(size)
        all_reduce_sum(grads[0])  # in place, no copy at all
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat.div_(size)
    all_reduce_sum(flat)
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()
