"""Trajectory-level Credit Decomposition (spec section 1): how far each step moved the latent
towards the final sample, and the step weights derived from it."""
from __future__ import annotations

from typing import Optional

import torch

#: Cosine denominators are clamped below at this value (spec 1.1: a zero latent has similarity 0).
NORM_FLOOR = 1e-12
#: Steps are converted to float32 in chunks of at most this many bytes (but at least one step), so
#: a bfloat16 FLUX trajectory is never copied whole; small trajectories go in one chunk.
DEFAULT_CHUNK_BYTES = 1 << 20


def similarity_to_final(latents: torch.Tensor, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                        final: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cosine similarity of every latent to the trajectory's final state.

    Args:
        latents: ``[B, T+1, ...]`` in sampling order (any float dtype; trailing dims flattened).
        chunk_bytes: float32 working-set size per chunk of steps.
        final: ``[B, ...]`` (one state's shape), an explicit final state ``z_T`` that replaces
            ``latents[:, -1]`` (spec 1.7: the last predicted clean sample); default the last latent.
    Returns:
        ``[B, T+1]`` float32, ``S[:, t] = cos(z_t, z_T)`` (``S[:, T] = 1``, or 0 for a zero ``z_T``).
    """
    batch, n_states = latents.shape[0], latents.shape[1]
    flat = latents.reshape(batch, n_states, -1)
    final = (flat[:, -1] if final is None else final.reshape(batch, -1)).float()  # [B, D]; the one kept copy
    if final.shape[-1] != flat.shape[-1]:
        raise ValueError(f"final: a state of {final.shape[-1]} values per sample, the latents' states have "
                         f"{flat.shape[-1]}")
    final_norm = torch.linalg.vector_norm(final, dim=-1)  # [B]
    earlier = n_states - 1  # z_0 .. z_{T-1}; z_T is `final` itself
    step_bytes = final.numel() * 4
    steps_per_chunk = max(1, min(earlier, chunk_bytes // max(step_bytes, 1)))
    # One float32 work buffer, reused by every chunk: no allocation (and no page faults) per chunk.
    # The dot products are an in-place product and a sum, not a bmm: torch's CPU bmm for these
    # [B, c, D] x [B, D, 1] shapes is slow and accumulates sequentially (~1e-4 error at D = 65536),
    # while sum() reduces pairwise (~1e-5) and the in-place product needs no temporary.
    work = final.new_empty((batch, steps_per_chunk, final.shape[-1]))
    norms = final.new_empty((batch, n_states))
    dots = final.new_empty((batch, n_states))
    for start in range(0, earlier, steps_per_chunk):  # a loop over chunks, not over steps
        stop = min(earlier, start + steps_per_chunk)
        chunk = work[:, :stop - start]
        chunk.copy_(flat[:, start:stop])  # [B, c, D] float32
        norms[:, start:stop] = torch.linalg.vector_norm(chunk, dim=-1)
        dots[:, start:stop] = chunk.mul_(final.unsqueeze(1)).sum(dim=-1)
    norms[:, -1] = final_norm
    dots[:, -1] = (final * final).sum(dim=-1)
    return dots / (norms * final_norm.unsqueeze(-1)).clamp(min=NORM_FLOOR)


def step_progress(similarity: torch.Tensor) -> torch.Tensor:
    """``dS[:, t] = S[:, t] - S[:, t-1]``: ``[B, T+1] -> [B, T]``."""
    return similarity[:, 1:] - similarity[:, :-1]


def step_share(delta_s: torch.Tensor, eps: float) -> torch.Tensor:
    """The paper's ``w_t``: positive progress plus ``eps``, normalised over steps. ``[B, T] -> [B, T]``."""
    positive = delta_s.clamp(min=0) + eps
    return positive / positive.sum(dim=-1, keepdim=True)


def step_weights(share: torch.Tensor, w_min: float) -> torch.Tensor:
    """``w_min + (1 - w_min) * T * p``: mean 1 over steps, each >= ``w_min``. ``[B, T] -> [B, T]``."""
    n_steps = share.shape[-1]
    return w_min + (1.0 - w_min) * n_steps * share


def trajectory_score(share: torch.Tensor, delta_s: torch.Tensor) -> torch.Tensor:
    """``q = sum_t p_t * dS_t``: ``[B, T] x [B, T] -> [B]`` (MOCA's exploration input)."""
    return (share * delta_s).sum(dim=-1)
