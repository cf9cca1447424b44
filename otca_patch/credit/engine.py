"""``compute_credit``: rewards ``[B, K]`` and latent trajectories ``[B, T+1, ...]`` to OTCA's
``[B, T]`` advantages, with every intermediate quantity of spec section 6."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Optional

import torch

from . import moca, modes, tcd, timing
from .batch import CreditBatch
from .config import CreditConfig
from .groups import dense_groups

#: Small per-sample quantities are computed in float64 (cheap at [B, T]) and returned in float32,
#: the dtype trainers keep their advantages in.
_WORK = torch.float64
_OUT = torch.float32


@dataclass
class Credit:
    """Every quantity of spec section 6 (float32 tensors on the latents' device).

    ``lambdas [B]`` and ``mixture [B, K]``, MOCA's, are computed when first read where the mode did not
    use them (``fusion``: a function returning both), so a mode that does not fuse never pays for them.
    """

    similarity: Optional[torch.Tensor]  # [B, T+1]; None when built from delta_s alone
    delta_s: torch.Tensor  # [B, T]
    step_share: torch.Tensor  # [B, T]
    step_weights: torch.Tensor  # [B, T]
    objective_advantages: torch.Tensor  # [B, K]
    trajectory_score: torch.Tensor  # [B]
    combined: torch.Tensor  # [B]
    advantages: torch.Tensor  # [B, T]
    mode: str = "otca"
    objective_step_weights: Optional[torch.Tensor] = None  # [K, T] under objective_timing="probe" (9.3)
    fusion: Callable[[], tuple] = field(default=None, repr=False, compare=False)

    #: the section-6 quantities in the spec's order (``tensors()``)
    QUANTITIES = ("similarity", "delta_s", "step_share", "step_weights", "objective_advantages", "trajectory_score",
                  "lambdas", "mixture", "combined", "advantages", "objective_step_weights")

    @cached_property
    def lambdas(self) -> torch.Tensor:  # [B]
        return self.fusion()[0]

    @cached_property
    def mixture(self) -> torch.Tensor:  # [B, K]
        return self.fusion()[1]

    def tensors(self) -> dict:
        """The section-6 quantities by name (those present)."""
        return {name: getattr(self, name) for name in self.QUANTITIES if getattr(self, name) is not None}

    def summary(self) -> dict:
        """Scalars (and short per-step / per-objective lists) for a training log."""
        adv = self.objective_advantages
        conflict = (adv.min(dim=-1).values < 0) & (adv.max(dim=-1).values > 0)
        return {
            "step_weight_mean_per_step": self.step_weights.mean(dim=0).tolist(),
            "step_weight_max": float(self.step_weights.max()),
            "mixture_mean_per_objective": self.mixture.mean(dim=0).tolist(),
            "objective_advantage_std": adv.std(dim=0, correction=0).tolist(),
            "conflict_share": float(conflict.float().mean()),
            "explored_share": float((self.lambdas > 0).float().mean()),
            "lambda_mean": float(self.lambdas.mean()),
            "combined_mean": float(self.combined.mean()),
            "combined_abs_mean": float(self.combined.abs().mean()),
            "advantage_abs_mean": float(self.advantages.abs().mean()),
        }


def compute_credit(rewards, latents: torch.Tensor, group_ids, config: Optional[CreditConfig] = None,
                   chunk_bytes: int = tcd.DEFAULT_CHUNK_BYTES, final: Optional[torch.Tensor] = None,
                   reward_window: Optional[torch.Tensor] = None, timing_map: Optional[torch.Tensor] = None,
                   **mode_inputs) -> Credit:
    """OTCA credit for a batch of sampled trajectories: ``credit_for`` of their ``CreditBatch``.

    Args:
        rewards: ``[B, K]`` raw reward per sample and objective.
        latents: ``[B, T+1, ...]`` trajectories in sampling order (``z_0`` noise ... ``z_T`` sample),
            any float dtype; never copied whole to float32.
        group_ids: ``[B]`` integer group label per sample (groups need not be contiguous).
        config: the credit rules; ``CreditConfig()`` (mode ``otca``) by default.
        final: ``[B, ...]`` explicit final state ``z_T`` replacing ``latents[:, -1]`` (spec 1.7,
            ``final_state="prediction"``: the last step's predicted clean sample).
        reward_window: ``[N, K]`` raw rewards of recent earlier batches, for ``reward_scale="window"``
            only (spec 2.1): each objective's scale is its std over these and ``rewards`` together
            (``None``: over ``rewards`` alone).
        timing_map: ``[K, T]`` the map ``decided`` (docs/credit.md 9), for the option
            ``objective_timing="probe"`` only; ``None`` (not yet measured): the mode's own rule.
        mode_inputs: only for the modes that declare them (``modes.INPUTS``): ``clean [B, T+1, ...]``
            (``coca``, spec 8.1), the predicted clean sample at each state ``z_0 .. z_{T-1}``, then the
            final sample; ``step_noise [T]`` or ``[B, T]`` (``tempflow``, spec 8.2), the std of each SDE
            transition.
    Returns:
        ``Credit`` with ``advantages [B, T]`` and every intermediate quantity.
    Raises:
        ValueError naming the argument for any malformed input, and when an advantage comes out
        non-finite (never returned for training). Inputs are never modified.
    """
    return credit_for(CreditBatch(rewards, group_ids, config, inputs=mode_inputs, reward_window=reward_window,
                                  timing_map=timing_map, latents=latents, final=final, chunk_bytes=chunk_bytes))


def credit_from_progress(rewards, delta_s: torch.Tensor, group_ids, config: Optional[CreditConfig] = None,
                         reward_window: Optional[torch.Tensor] = None, timing_map: Optional[torch.Tensor] = None,
                         **mode_inputs) -> Credit:
    """The same credit from precomputed per-step progress ``delta_s [B, T]`` (no latents).

    For trainers whose latents live on several processes: each computes its samples' ``delta_s``
    with ``tcd``, gathers ``rewards``, ``delta_s`` and ``group_ids``, and calls this once.
    ``similarity`` is then ``None`` in the result.
    """
    return credit_for(CreditBatch(rewards, group_ids, config, delta_s=delta_s, inputs=mode_inputs,
                                  reward_window=reward_window, timing_map=timing_map))


def credit_for(batch: CreditBatch) -> Credit:
    """The credit of a checked batch: what every mode reads, then the mode's own rule (``modes.py``)."""
    config, delta_s = batch.config, batch.delta_s
    mode = modes.get(config.mode)
    device = delta_s.device
    index, n_groups = dense_groups(batch.group_ids)
    n_objectives = batch.rewards.shape[1]
    weights = torch.tensor(config.objective_weights or (1.0,) * n_objectives, dtype=_WORK, device=device)
    corr = config.std_correction

    share = tcd.step_share(delta_s, config.eps)
    # weight_scope=batch (spec 1.6): the batch's mean share for every sample; q keeps each sample's
    weight_share = share.mean(dim=0, keepdim=True).expand_as(share) if config.weight_scope == "batch" else share
    weights_per_step = tcd.step_weights(weight_share, config.w_min)
    window = batch.scale_window
    window_std = None if window is None else moca.window_reward_std(window, corr)
    advantages_k = moca.objective_advantages(batch.rewards, index, n_groups, weights, corr, config.adv_eps,
                                             config.std_scope, window_std)
    score = tcd.trajectory_score(share, delta_s)
    per_step = weights_per_step if mode.step_weighted else torch.ones_like(weights_per_step)
    shared = modes.Shared(
        config=config,
        rewards=batch.rewards if window_std is None else moca.rescale_rewards(batch.rewards, window_std),
        objective_weights=weights, objective_advantages=advantages_k, trajectory_score=score,
        step_weights=weights_per_step, per_step=per_step, index=index, n_groups=n_groups, inputs=batch.inputs)
    assigned = mode.assign(shared)
    advantages, objective_steps = assigned.advantages, None
    if config.uses_timing_map:  # section 9.3: each objective's share over its own steps
        objective_steps = torch.ones((n_objectives, delta_s.shape[1]), dtype=_WORK, device=device)
        if batch.timing_map is not None:
            objective_steps = timing.timing_weights(batch.timing_map.to(device), config.timing_floor, config.eps)
            if assigned.parts is None:
                raise ValueError(f"timing_map: mode {mode.name} is registered with splits=True but returned no "
                                 "per-objective parts")
            advantages = timing.timed_advantages(assigned.parts(), objective_steps, per_step)

    out = lambda t: t.to(_OUT)  # noqa: E731
    _check_finite_advantages(out(advantages), config)
    return Credit(
        similarity=None if batch.similarity is None else out(batch.similarity),
        delta_s=out(delta_s), step_share=out(share), step_weights=out(assigned.step_weights),
        objective_advantages=out(advantages_k), trajectory_score=out(score), combined=out(assigned.combined),
        advantages=out(advantages), mode=config.mode,
        objective_step_weights=None if objective_steps is None else out(objective_steps),
        fusion=lambda: (out(shared.lambdas), out(shared.mixture)),
    )


def _check_finite_advantages(advantages: torch.Tensor, config: CreditConfig) -> None:
    """A non-finite advantage is an error, never a training signal (upstream's clipping would turn
    +-inf into its bound and train on). One reduction; the position is looked up on the error path only."""
    if bool(torch.isfinite(advantages).all()):
        return
    bad = ~torch.isfinite(advantages)
    sample, step = (int(i) for i in bad.nonzero()[0])
    raise ValueError(f"credit: {int(bad.sum())} of {advantages.numel()} advantages are not finite (first: sample "
                     f"{sample}, step {step}: {advantages[sample, step].item()}) in mode {config.mode} with objective "
                     f"weights {list(config.objective_weights) if config.objective_weights else 'all 1'}; "
                     f"refusing to train on them")
