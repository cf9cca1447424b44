"""``CreditBatch``: one batch's input to the credit engine, checked once when it is built, so that the
engine and the modes read it without checking anything again."""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Mapping, Optional

import torch

from . import inputs, modes, tcd, timing
from .config import CreditConfig
from .groups import check_std_sizes
from .inputs import check_finite

_WORK = torch.float64


@dataclass(frozen=True, eq=False)
class CreditBatch:
    """Rewards, per-step progress and groups of B sampled trajectories, with what the options and the
    mode use. Built from the latents (``latents=``, ``final=``, ``chunk_bytes=``: TCD's similarity and
    progress are computed from them, spec 1) or from progress computed where the latents are
    (``delta_s=``: the multi-rank path). Once built, every field holds its checked form:

    - ``rewards [B, K]`` float64 and ``group_ids [B]`` integer labels, on the progress' device;
    - ``config``: the credit rules (``CreditConfig()`` when none was given);
    - ``delta_s [B, T]`` float64; ``similarity [B, T+1]`` float32 when built from latents, else None;
    - ``inputs``: the mode's declared inputs (``modes.INPUTS``) as ``inputs.py`` prepares them;
    - ``reward_window [N, K]`` float64: earlier batches' raw rewards, under ``reward_scale="window"``;
    - ``timing_map [K, T]`` float64: the map ``decided`` (NaN: undefined, else in [0, 1]), when the
      option ``objective_timing`` uses one and it was measured.

    Raises ``ValueError`` naming the first malformed argument, and for an input that nothing would use
    (it would be silently ignored).
    """

    rewards: torch.Tensor
    group_ids: torch.Tensor
    config: Optional[CreditConfig] = None
    delta_s: Optional[torch.Tensor] = None
    inputs: Mapping = field(default_factory=dict)
    reward_window: Optional[torch.Tensor] = None
    timing_map: Optional[torch.Tensor] = None
    latents: InitVar[Optional[torch.Tensor]] = None
    final: InitVar[Optional[torch.Tensor]] = None
    chunk_bytes: InitVar[int] = tcd.DEFAULT_CHUNK_BYTES
    similarity: Optional[torch.Tensor] = field(init=False, default=None)

    def __post_init__(self, latents, final, chunk_bytes) -> None:
        keep = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  frozen: set once, here
        config = self.config if self.config is not None else CreditConfig()
        keep("config", config)
        rewards = _checked_rewards(self.rewards)
        batch, n_objectives = rewards.shape
        if latents is not None:
            if self.delta_s is not None:
                raise ValueError("delta_s: give the latents or their progress delta_s, not both")
            _check_latents(latents, batch)
        else:
            _check_delta_s(self.delta_s, batch)
        group_ids = _checked_group_ids(self.group_ids, batch)
        _check_objective_weights(config, n_objectives)
        if latents is not None:
            _check_final(final, latents)
            keep("similarity", _similarity(latents, final, chunk_bytes))
            delta_s = tcd.step_progress(self.similarity.to(_WORK))
        else:
            if final is not None:
                raise ValueError("final: replaces the latents' last state; give it with the latents, not with delta_s")
            delta_s = self.delta_s.to(_WORK)
        device = delta_s.device
        keep("delta_s", delta_s)
        keep("rewards", rewards.to(device=device, dtype=_WORK))
        keep("group_ids", group_ids.to(device))
        mode = modes.get(config.mode)
        keep("inputs", _mode_inputs(mode, self.inputs, latents is not None, batch, delta_s.shape[1], chunk_bytes))
        keep("reward_window", _checked_reward_window(config, self.reward_window, n_objectives))
        keep("timing_map", _checked_timing_map(config, self.timing_map, n_objectives, delta_s.shape[1]))
        check_std_sizes(self.group_ids, config.std_correction,
                        batch_std=config.std_scope == "batch" or mode.whole_batch_std)

    @property
    def scale_window(self) -> Optional[torch.Tensor]:
        """The rewards whose per-objective std scales them under ``reward_scale="window"`` (spec 2.1):
        the earlier batches' then this one's, ``[N + B, K]``; None under the default ``"group"``."""
        if self.config.reward_scale != "window":
            return None
        if self.reward_window is None:
            return self.rewards
        return torch.cat([self.reward_window.to(self.rewards.device), self.rewards])


def _checked_rewards(rewards) -> torch.Tensor:
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


def _check_delta_s(delta_s, batch: int) -> None:
    """``delta_s`` must be a finite ``[B, T]`` tensor with ``B == batch`` and ``T >= 1``."""
    if not isinstance(delta_s, torch.Tensor) or delta_s.dim() != 2:
        raise ValueError(f"delta_s: expected a [B, T] tensor, got {getattr(delta_s, 'shape', type(delta_s).__name__)}")
    if delta_s.shape[0] != batch or delta_s.shape[1] < 1:
        raise ValueError(f"delta_s: shape {tuple(delta_s.shape)} does not fit rewards' B = {batch} with T >= 1")
    check_finite("delta_s", delta_s)


def _check_final(final, latents: torch.Tensor) -> None:
    """``final``, when given, must be a float ``[B, ...]`` tensor: one state shaped like ``latents[:, 0]`` per sample."""
    if final is None:
        return
    if not isinstance(final, torch.Tensor) or not final.is_floating_point() or \
            tuple(final.shape) != (latents.shape[0],) + tuple(latents.shape[2:]):
        raise ValueError(f"final: expected a float tensor of shape {(latents.shape[0],) + tuple(latents.shape[2:])} "
                         f"(one state per sample), got {getattr(final, 'shape', type(final).__name__)}")


def _similarity(latents: torch.Tensor, final: Optional[torch.Tensor], chunk_bytes: int) -> torch.Tensor:
    """TCD's ``[B, T+1]`` similarity to the final state; a non-finite latent is found on the error path
    only, so finite inputs pay no extra pass over the latents."""
    similarity = tcd.similarity_to_final(latents, chunk_bytes=chunk_bytes, final=final)
    if not torch.isfinite(similarity).all():
        if final is not None:
            check_finite("final", final)
        earlier = latents if final is None else latents[:, :-1]
        if not torch.isfinite(earlier).all():
            check_finite("latents", earlier)
        raise ValueError("latents: magnitudes overflow float32 when computing cosine similarity; rescale the trajectory")
    return similarity


def _checked_group_ids(group_ids, batch: int) -> torch.Tensor:
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


def _mode_inputs(mode: modes.Mode, given: Mapping, from_latents: bool, batch: int, n_steps: int,
                 chunk_bytes: int) -> dict:
    """The inputs ``mode`` declares, checked (``inputs.py``); an input given to a mode that does not
    declare it is refused (it would be silently unused)."""
    if not from_latents:
        for name in mode.needs:
            if not modes.INPUTS[name].from_progress:
                raise ValueError(f"mode: {mode.name} needs {modes.INPUTS[name].what}; use compute_credit(..., {name}=...)")
    for name, value in given.items():
        if name not in modes.INPUTS:
            raise ValueError(f"{name}: no credit mode takes this input (inputs: {', '.join(modes.INPUTS)})")
        if value is not None and name not in mode.needs:
            raise ValueError(f"{name}: only mode {', '.join(modes.users(name))} uses {modes.INPUTS[name].what} "
                             f"(mode is {mode.name!r})")
    return {name: inputs.prepare(name, given.get(name), mode.name, batch, n_steps, chunk_bytes)
            for name in mode.needs}


def _checked_reward_window(config: CreditConfig, reward_window, n_objectives: int) -> Optional[torch.Tensor]:
    """Earlier batches' raw rewards ``[N, K]`` (float64) for ``reward_scale="window"``; refused under the
    default ``"group"`` (it would be silently unused)."""
    if config.reward_scale != "window":
        if reward_window is not None:
            raise ValueError(f"reward_window: only reward_scale='window' uses it (reward_scale is {config.reward_scale!r})")
        return None
    if reward_window is None:
        return None
    if not isinstance(reward_window, torch.Tensor) or reward_window.dim() != 2 or reward_window.shape[1] != n_objectives:
        raise ValueError(f"reward_window: expected a [N, K] tensor with K = {n_objectives} (raw rewards of "
                         f"earlier batches), got {getattr(reward_window, 'shape', type(reward_window).__name__)}")
    check_finite("reward_window", reward_window)
    return reward_window.to(_WORK)


def _checked_timing_map(config: CreditConfig, timing_map, n_objectives: int, n_steps: int) -> Optional[torch.Tensor]:
    """The map ``decided [K, T]`` (float64) when the option uses one; None when not measured yet.
    Refused when the option uses none (it would be silently unused)."""
    if not config.uses_timing_map:
        if timing_map is not None:
            raise ValueError("timing_map: a map was given but the option objective_timing is "
                             f"{config.objective_timing!r} (set it to 'probe' to use the map)")
        return None
    return None if timing_map is None else timing.checked_timing_map(timing_map, n_objectives, n_steps)
