"""``compute_credit``: rewards ``[B, K]`` and latent trajectories ``[B, T+1, ...]`` to OTCA's
``[B, T]`` advantages, with every intermediate quantity of spec section 6."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import torch

from . import inputs, moca, modes, tcd, timing
from .config import CreditConfig
from .groups import check_std_sizes, dense_groups
from .inputs import check_finite

#: Small per-sample quantities are computed in float64 (cheap at [B, T]) and returned in float32,
#: the dtype trainers keep their advantages in.
_WORK = torch.float64
_OUT = torch.float32


@dataclass
class Credit:
    """Every quantity of spec section 6 (float32 tensors on the latents' device)."""

    similarity: Optional[torch.Tensor]  # [B, T+1]; None when built from delta_s alone
    delta_s: torch.Tensor  # [B, T]
    step_share: torch.Tensor  # [B, T]
    step_weights: torch.Tensor  # [B, T]
    objective_advantages: torch.Tensor  # [B, K]
    trajectory_score: torch.Tensor  # [B]
    lambdas: torch.Tensor  # [B]
    mixture: torch.Tensor  # [B, K]
    combined: torch.Tensor  # [B]
    advantages: torch.Tensor  # [B, T]
    mode: str = "otca"
    objective_step_weights: Optional[torch.Tensor] = None  # [K, T] under objective_timing="probe" (9.3)

    def tensors(self) -> dict:
        """The section-6 quantities by name (those present)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "mode" and getattr(self, f.name) is not None}

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
                   clean: Optional[torch.Tensor] = None, step_noise: Optional[torch.Tensor] = None,
                   reward_window: Optional[torch.Tensor] = None,
                   timing_map: Optional[torch.Tensor] = None) -> Credit:
    """OTCA credit for a batch of sampled trajectories.

    Args:
        rewards: ``[B, K]`` raw reward per sample and objective.
        latents: ``[B, T+1, ...]`` trajectories in sampling order (``z_0`` noise ... ``z_T`` sample),
            any float dtype; never copied whole to float32.
        group_ids: ``[B]`` integer group label per sample (groups need not be contiguous).
        config: the credit rules; ``CreditConfig()`` (mode ``otca``) by default.
        final: ``[B, ...]`` explicit final state ``z_T`` replacing ``latents[:, -1]`` (spec 1.7,
            ``final_state="prediction"``: the last step's predicted clean sample).
        clean: ``[B, T+1, ...]``, only for the modes that declare it (``modes.py``: ``coca``, spec
            8.1): the predicted clean sample at each state ``z_0 .. z_{T-1}``, then the final sample.
        step_noise: ``[T]`` or ``[B, T]``, only for the modes that declare it (``tempflow``, spec
            8.2): the std of each SDE transition.
        reward_window: ``[N, K]`` raw rewards of recent earlier batches, for ``reward_scale="window"``
            only (spec 2.1): each objective's scale is its std over these and ``rewards`` together
            (``None``: over ``rewards`` alone).
        timing_map: ``[K, T]`` the map ``decided`` (docs/credit.md 9), for the option
            ``objective_timing="probe"`` only; ``None`` (not yet measured): the mode's own rule.
    Returns:
        ``Credit`` with ``advantages [B, T]`` and every intermediate quantity.
    Raises:
        ValueError naming the argument for any malformed input, and when an advantage comes out
        non-finite (never returned for training). Inputs are never modified.
    """
    config = config if config is not None else CreditConfig()
    rewards = _check_rewards(rewards)
    _check_latents(latents, rewards.shape[0])
    group_ids = _check_group_ids(group_ids, rewards.shape[0])
    _check_objective_weights(config, rewards.shape[1])
    _check_final(final, latents)
    similarity = tcd.similarity_to_final(latents, chunk_bytes=chunk_bytes, final=final)
    if not torch.isfinite(similarity).all():
        if final is not None:
            check_finite("final", final)
        _raise_non_finite_latents(latents if final is None else latents[:, :-1])
    delta_s = tcd.step_progress(similarity.to(_WORK))
    mode_inputs = _mode_inputs(modes.get(config.mode), {"clean": clean, "step_noise": step_noise}, latents.shape[0],
                               latents.shape[1] - 1, chunk_bytes)
    window = _check_reward_window(config, reward_window, rewards)
    timing_map = _check_timing_map(config, timing_map, rewards.shape[1], delta_s.shape[1])
    return _credit(rewards, delta_s, group_ids, config, similarity, mode_inputs, window, timing_map)


def credit_from_progress(rewards, delta_s: torch.Tensor, group_ids, config: Optional[CreditConfig] = None,
                         step_noise: Optional[torch.Tensor] = None, reward_window: Optional[torch.Tensor] = None,
                         timing_map: Optional[torch.Tensor] = None) -> Credit:
    """The same credit from precomputed per-step progress ``delta_s [B, T]`` (no latents).

    For trainers whose latents live on several processes: each computes its samples' ``delta_s``
    with ``tcd``, gathers ``rewards``, ``delta_s`` and ``group_ids``, and calls this once.
    ``similarity`` is then ``None`` in the result.
    """
    config = config if config is not None else CreditConfig()
    rewards = _check_rewards(rewards)
    if not isinstance(delta_s, torch.Tensor) or delta_s.dim() != 2:
        raise ValueError(f"delta_s: expected a [B, T] tensor, got {getattr(delta_s, 'shape', type(delta_s).__name__)}")
    if delta_s.shape[0] != rewards.shape[0] or delta_s.shape[1] < 1:
        raise ValueError(f"delta_s: shape {tuple(delta_s.shape)} does not fit rewards' B = {rewards.shape[0]} with T >= 1")
    check_finite("delta_s", delta_s)
    group_ids = _check_group_ids(group_ids, rewards.shape[0])
    _check_objective_weights(config, rewards.shape[1])
    mode = modes.get(config.mode)
    for name in mode.needs:
        if not modes.INPUTS[name].from_progress:
            raise ValueError(f"mode: {mode.name} needs {modes.INPUTS[name].what}; use compute_credit(..., {name}=...)")
    mode_inputs = _mode_inputs(mode, {"step_noise": step_noise}, delta_s.shape[0], delta_s.shape[1], 0)
    window = _check_reward_window(config, reward_window, rewards)
    timing_map = _check_timing_map(config, timing_map, rewards.shape[1], delta_s.shape[1])
    return _credit(rewards, delta_s.to(_WORK), group_ids, config, None, mode_inputs, window, timing_map)


def _check_timing_map(config: CreditConfig, timing_map, n_objectives: int, n_steps: int):
    """The map ``decided [K, T]`` (float64) for ``objective_timing="probe"``; ``None`` when not measured
    yet. Refused under ``off`` (it would be silently unused)."""
    if not config.uses_timing_map:
        if timing_map is not None:
            raise ValueError("timing_map: a map was given but the option objective_timing is "
                             f"{config.objective_timing!r} (set it to 'probe' to use the map)")
        return None
    return None if timing_map is None else timing.checked_timing_map(timing_map, n_objectives, n_steps)


def _check_reward_window(config: CreditConfig, reward_window, rewards: torch.Tensor):
    """The rewards whose per-objective std scales them (spec 2.1): ``[N + B, K]``, or ``None`` for the
    default ``reward_scale="group"`` (which refuses a window: it would be silently unused)."""
    if config.reward_scale != "window":
        if reward_window is not None:
            raise ValueError(f"reward_window: only reward_scale='window' uses it (reward_scale is {config.reward_scale!r})")
        return None
    if reward_window is None:
        return rewards.to(_WORK)
    if not isinstance(reward_window, torch.Tensor) or reward_window.dim() != 2 or \
            reward_window.shape[1] != rewards.shape[1]:
        raise ValueError(f"reward_window: expected a [N, K] tensor with K = {rewards.shape[1]} (raw rewards of "
                         f"earlier batches), got {getattr(reward_window, 'shape', type(reward_window).__name__)}")
    check_finite("reward_window", reward_window)
    return torch.cat([reward_window.to(device=rewards.device, dtype=_WORK), rewards.to(_WORK)])


def _mode_inputs(mode: modes.Mode, given: dict, batch: int, n_steps: int, chunk_bytes: int) -> dict:
    """The inputs ``mode`` declares, checked (``inputs.py``); an input given to a mode that does not
    declare it is refused (it would be silently unused)."""
    for name, value in given.items():
        if value is not None and name not in mode.needs:
            raise ValueError(f"{name}: only mode {', '.join(modes.users(name))} uses {modes.INPUTS[name].what} "
                             f"(mode is {mode.name!r})")
    return {name: inputs.prepare(name, given.get(name), mode.name, batch, n_steps, chunk_bytes)
            for name in mode.needs}


def _credit(rewards, delta_s, group_ids, config: CreditConfig, similarity, mode_inputs: dict, window=None,
            timing_map=None) -> Credit:
    mode = modes.get(config.mode)
    device = delta_s.device
    rewards = rewards.to(device=device, dtype=_WORK)
    group_ids = group_ids.to(device)
    check_std_sizes(group_ids, config.std_correction, batch_std=config.std_scope == "batch" or mode.whole_batch_std)
    index, n_groups = dense_groups(group_ids)
    n_objectives = rewards.shape[1]
    weights = torch.tensor(config.objective_weights or (1.0,) * n_objectives, dtype=_WORK, device=device)
    corr = config.std_correction

    share = tcd.step_share(delta_s, config.eps)
    # weight_scope=batch (spec 1.6): the batch's mean share for every sample; q keeps each sample's
    weight_share = share.mean(dim=0, keepdim=True).expand_as(share) if config.weight_scope == "batch" else share
    weights_per_step = tcd.step_weights(weight_share, config.w_min)
    window_std = None if window is None else moca.window_reward_std(window.to(device), corr)
    advantages_k = moca.objective_advantages(rewards, index, n_groups, weights, corr, config.adv_eps,
                                             config.std_scope, window_std)
    score = tcd.trajectory_score(share, delta_s)
    lambdas = moca.exploration_bias(score, advantages_k, index, n_groups, corr, config.eps, config.explore,
                                    center=config.explore_center, scale=config.explore_scale)
    if config.fusion == "group":
        fused, mixture = moca.group_fusion(advantages_k, lambdas, index, n_groups)
    else:
        fused, mixture = moca.min_norm_fusion(advantages_k, lambdas)
    per_step = weights_per_step if mode.step_weighted else torch.ones_like(weights_per_step)
    assigned = mode.assign(modes.Shared(
        config=config, rewards=rewards if window_std is None else moca.rescale_rewards(rewards, window_std),
        objective_weights=weights, objective_advantages=advantages_k, fused=fused, mixture=mixture,
        step_weights=weights_per_step, per_step=per_step, index=index, n_groups=n_groups, inputs=mode_inputs))
    advantages, objective_steps = assigned.advantages, None
    if config.uses_timing_map:  # section 9.3: each objective's share over its own steps
        objective_steps = torch.ones((n_objectives, delta_s.shape[1]), dtype=_WORK, device=device)
        if timing_map is not None:
            objective_steps = timing.timing_weights(timing_map.to(device), config.timing_floor, config.eps)
            if assigned.parts is None:
                raise ValueError(f"timing_map: mode {mode.name} is registered with splits=True but returned no "
                                 "per-objective parts")
            advantages = timing.timed_advantages(assigned.parts(), objective_steps, per_step)

    out = lambda t: t.to(_OUT)  # noqa: E731
    _check_finite_advantages(out(advantages), config)
    return Credit(
        similarity=None if similarity is None else out(similarity),
        delta_s=out(delta_s), step_share=out(share), step_weights=out(assigned.step_weights),
        objective_advantages=out(advantages_k), trajectory_score=out(score), lambdas=out(lambdas),
        mixture=out(mixture), combined=out(assigned.combined), advantages=out(advantages), mode=config.mode,
        objective_step_weights=None if objective_steps is None else out(objective_steps),
    )


# ----------------------------------------------------------------------------- input checks

def _check_rewards(rewards) -> torch.Tensor:
    if not isinstance(rewards, torch.Tensor):
        try:
            rewards = torch.as_tensor(rewards, dtype=_WORK)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"rewards: cannot be read as a [B, K] tensor ({exc})") from None
    if rewards.dim() != 2:
        raise ValueError(f"rewards: expected shape [B, K], got {tuple(rewards.shape)}")
    if rewards.shape[0] < 1:
        raise ValueError("rewards: the batch is empty (B = 0)")
    if rewards.shape[1] < 1:
        raise ValueError("rewards: no objectives (K = 0); give at least one reward column")
    if not (rewards.is_floating_point() or rewards.dtype in (torch.int32, torch.int64)):
        raise ValueError(f"rewards: expected a numeric tensor, got dtype {rewards.dtype}")
    check_finite("rewards", rewards)
    return rewards


def _check_latents(latents, batch: int) -> None:
    """``latents`` must be a float ``[B, T+1, ...]`` tensor with ``B == batch``, ``T >= 1``, non-empty states."""
    if not isinstance(latents, torch.Tensor):
        raise ValueError(f"latents: expected a torch.Tensor [B, T+1, ...], got {type(latents).__name__}")
    if not latents.is_floating_point():
        raise ValueError(f"latents: expected a floating-point tensor, got dtype {latents.dtype}")
    if latents.dim() < 2:
        raise ValueError(f"latents: expected shape [B, T+1, ...], got {tuple(latents.shape)}")
    if latents.shape[0] != batch:
        raise ValueError(f"latents: batch size {latents.shape[0]} does not match rewards' B = {batch}")
    if latents.shape[1] < 2:
        raise ValueError(f"latents: need T+1 >= 2 states per trajectory, got {latents.shape[1]}")
    if latents[0, 0].numel() == 0:
        raise ValueError(f"latents: each state must hold at least one value, got shape {tuple(latents.shape)}")


def _check_final(final, latents: torch.Tensor) -> None:
    """``final``, when given, must be a float ``[B, ...]`` tensor: one state shaped like ``latents[:, 0]`` per sample."""
    if final is None:
        return
    if not isinstance(final, torch.Tensor) or not final.is_floating_point() or \
            tuple(final.shape) != (latents.shape[0],) + tuple(latents.shape[2:]):
        raise ValueError(f"final: expected a float tensor of shape {(latents.shape[0],) + tuple(latents.shape[2:])} "
                         f"(one state per sample), got {getattr(final, 'shape', type(final).__name__)}")


def _check_group_ids(group_ids, batch: int) -> torch.Tensor:
    if not isinstance(group_ids, torch.Tensor):
        try:
            group_ids = torch.as_tensor(group_ids)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"group_ids: cannot be read as a [B] integer tensor ({exc})") from None
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids: expected integer labels, got dtype {group_ids.dtype}")
    if group_ids.dim() != 1 or group_ids.shape[0] != batch:
        raise ValueError(f"group_ids: expected shape [{batch}] (one label per sample), got {tuple(group_ids.shape)}")
    return group_ids


def _check_objective_weights(config: CreditConfig, n_objectives: int) -> None:
    if config.objective_weights is not None and len(config.objective_weights) != n_objectives:
        raise ValueError(
            f"objective_weights: {len(config.objective_weights)} weights given for K = {n_objectives} objectives"
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


def _raise_non_finite_latents(latents: torch.Tensor) -> None:
    """Only reached on the error path, so finite inputs pay no extra pass over the latents."""
    if not torch.isfinite(latents).all():
        check_finite("latents", latents)
    raise ValueError("latents: magnitudes overflow float32 when computing cosine similarity; rescale the trajectory")
