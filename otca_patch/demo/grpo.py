"""GRPO post-training with DanceGRPO's FLUX mathematics, written from its equations: groups of G
SDE rollouts per prompt, advantages from ``otca_patch.credit`` (every mode, vanilla included), a
PPO-clipped ratio per (sample, step) over a random subset of steps, advantage clipping and
gradient accumulation."""
from __future__ import annotations

import collections
import copy
import functools
import operator
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from otca_patch.credit import group_ids_from_size
from otca_patch.credit.timing import decided_from_moments

from .config import DemoConfig
from .data import sample_prompts
from .evaluation import EvalSet, evaluate
from .gradients import MarbleCombiner, conflict_diagnostic, nanmean
from .model import TinyFlux, unpack
from .pixel_rewards import objective_rewards
from .sampling import Rollout, gaussian_log_prob, sample_trajectories, sde_transition, sigma_schedule
from .timing_probe import rollout_moments
from .variants import REWARD_WINDOW_BATCHES, TIMING_WINDOW_BATCHES, Variant, engine_rewards, variant_credit


def ppo_clipped_loss(new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                     clip_range: float, adv_clip_max: float) -> torch.Tensor:
    """Per-element PPO loss ``max(-A r, -A clip(r, 1 - c, 1 + c))`` with ``r = exp(new - old)`` and
    ``A`` clamped to ``[-adv_clip_max, adv_clip_max]``. All inputs ``[M]``; returns ``[M]``."""
    adv = advantages.clamp(-adv_clip_max, adv_clip_max)
    ratio = torch.exp(new_log_probs - old_log_probs)
    return torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip_range, 1 + clip_range))


def iteration_generator(seed: int, iteration: int, stream: int) -> torch.Generator:
    """An independent generator per (seed, iteration, purpose): rollouts of every mode draw the same
    prompts and noise whatever the other streams consumed."""
    return torch.Generator().manual_seed(((seed * 1_000_003 + iteration) * 7 + stream) % (2**63 - 1))


_ROLLOUT, _ORDER = 0, 1


@dataclass
class Batch:
    """One iteration's rollouts and their rewards (``B = prompts_per_step * group_size``)."""

    prompt_ids: torch.Tensor  # [B, 4], groups contiguous (DanceGRPO's repeat_interleave)
    group_ids: torch.Tensor  # [B]
    rollout: Rollout
    rewards: torch.Tensor  # [B, K]
    eta: float = 0.0  # the SDE noise level the rollout was sampled with (TempFlow-GRPO's step noise)


def collect_batch(model: TinyFlux, config: DemoConfig, seed: int, iteration: int) -> Batch:
    """Sample G trajectories for each of ``prompts_per_step`` prompts and score their images."""
    generator = iteration_generator(seed, iteration, _ROLLOUT)
    prompts = sample_prompts(config.prompts_per_step, generator)
    prompt_ids = prompts.repeat_interleave(config.group_size, dim=0)
    token_shape = model.token_shape
    if config.init_same_noise:
        noise = torch.randn((config.prompts_per_step,) + token_shape, generator=generator)
        noise = noise.repeat_interleave(config.group_size, dim=0)
    else:
        noise = torch.randn((config.batch_size,) + token_shape, generator=generator)
    sigmas = sigma_schedule(config.sampling_steps, config.shift)
    rollout = sample_trajectories(model, prompt_ids, noise, sigmas, config.eta, generator)
    rewards = objective_rewards(unpack(rollout.final_clean, config.image_size), prompt_ids, config.objectives)
    group_ids = group_ids_from_size(config.batch_size, config.group_size)
    return Batch(prompt_ids=prompt_ids, group_ids=group_ids, rollout=rollout, rewards=rewards, eta=config.eta)


def assign_credit(batch: Batch, variant: Variant, raw_scales=None, reward_window=None, timing_map=None):
    """``(credit, advantages [B, T])`` of ``variant`` from the credit engine (the code a real run uses).
    CoCA gets the predicted clean samples, TempFlow-GRPO the std ``eta sqrt(sigma_t - sigma_t+1)`` of each step;
    ``sum_raw`` the rewards times ``raw_scales [K]``; ``reward_scale="window"`` variants ``reward_window [N, K]``
    (the rewards the engine saw in earlier iterations); ``objective_timing="probe"`` variants the map
    ``timing_map [K, T]`` (``None``: not measured yet)."""
    sigmas = batch.rollout.sigmas
    step_noise = batch.eta * (sigmas[:-1] - sigmas[1:]).clamp(min=0).sqrt()
    rewards = engine_rewards(variant, batch.rewards, raw_scales if raw_scales is not None else [1.0] * batch.rewards.shape[1])
    return variant_credit(variant, rewards, batch.rollout.latents, batch.group_ids,
                          clean=batch.rollout.clean, step_noise=step_noise, reward_window=reward_window,
                          timing_map=timing_map)


def trained_step_order(batch_size: int, n_steps: int, n_trained: int, generator: torch.Generator) -> torch.Tensor:
    """``[B, n_trained]``: per sample, the first ``n_trained`` of a random order of steps ``0..n_steps-1``."""
    return torch.argsort(torch.rand(batch_size, n_steps, generator=generator), dim=1)[:, :n_trained]


def policy_update(model: TinyFlux, optimizer: torch.optim.Optimizer, batch: Batch, advantages: torch.Tensor,
                  config: DemoConfig, seed: int, iteration: int, objective_advantages: Optional[torch.Tensor] = None,
                  combiner: Optional[MarbleCombiner] = None) -> dict:
    """One pass over the batch: micro-batches of samples, each training its own shuffled steps.

    The last sampling step is not trained (as upstream); with ``timestep_fraction = 1`` every other is. Each micro-batch's loss is divided by
    ``grad_accum * trained_steps`` and the optimizer steps every ``grad_accum`` micro-batches, so a
    step's gradient is the mean over its samples and steps (upstream's scaling with micro_batch = 1).
    ``advantages [B, T]``.

    With ``objective_advantages [B, K]`` every update also takes each objective's own gradient (the
    same PPO loss with ``A[:, k]`` broadcast over steps; one batched backward pass for all of them)
    and logs its cosine with the applied update (``gradients.conflict_diagnostic``). With
    ``combiner`` (MARBLE) the applied update is the combiner's, built from those gradients, and
    ``advantages`` is not used.
    Returns summed loss, clip fraction, the last gradient norm, and per update the diagnostic.
    """
    rollout = batch.rollout
    n_trainable = rollout.log_probs.shape[1] - 1
    order = trained_step_order(config.batch_size, n_trainable, config.trained_steps,
                               iteration_generator(seed, iteration, _ORDER))
    scale = config.grad_accum * config.trained_steps
    params = _trainable(model)
    total_loss, clipped, count, grad_norm = 0.0, 0, 0, 0.0
    diagnostics = []
    objective_grads = None  # [K, P] accumulated over the micro-batches of one update
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for micro_index, rows in enumerate(torch.arange(config.batch_size).split(config.micro_batch)):
        for column in range(config.trained_steps):
            steps = order[rows, column]  # [m] original step index (and sigma index) per sample
            loss, n_clipped, step_grads = _backward_step(model, batch, rows, steps, advantages, objective_advantages,
                                                         combiner, params, scale, config)
            if step_grads is not None:
                objective_grads = step_grads + (0 if objective_grads is None else objective_grads)
            total_loss += loss
            clipped += n_clipped
            count += rows.numel()
        if (micro_index + 1) % config.grad_accum == 0:
            grad_norm, diagnostic = _optimizer_step(optimizer, params, objective_grads, combiner, config.max_grad_norm)
            if diagnostic is not None:
                diagnostics.append(diagnostic)
            objective_grads = None
    model.eval()
    return {"loss": total_loss, "clip_fraction": clipped / max(count, 1), "grad_norm": grad_norm,
            "diagnostics": diagnostics}


def _backward_step(model: TinyFlux, batch: Batch, rows: torch.Tensor, steps: torch.Tensor, advantages: torch.Tensor,
                   objective_advantages: Optional[torch.Tensor], combiner: Optional[MarbleCombiner], params: list,
                   scale: float, config: DemoConfig) -> tuple[float, int, Optional[torch.Tensor]]:
    """The PPO loss of one trained step per sample of a micro-batch, and its backward pass.

    ``rows [m]`` are the samples, ``steps [m]`` the step trained for each. Without
    ``objective_advantages [B, K]`` the loss's gradient is added to the parameters' ``.grad``; with
    them each objective's gradient is taken too (one batched pass), and the loss's is added only
    without ``combiner``. Returns the loss, the number of ratios outside the clip range, and this
    step's objective gradients ``[K, P]`` (``None`` without ``objective_advantages``).
    """
    rollout = batch.rollout
    z, z_next = rollout.latents[rows, steps], rollout.latents[rows, steps + 1]
    sigma, sigma_next = rollout.sigmas[steps], rollout.sigmas[steps + 1]
    step = sde_transition(z, model(z, sigma, batch.prompt_ids[rows]), sigma, sigma_next, config.eta)
    new_log_probs = gaussian_log_prob(z_next, step.mean, step.std)
    old_log_probs = rollout.log_probs[rows, steps]
    loss_of = lambda adv: ppo_clipped_loss(new_log_probs, old_log_probs, adv, config.clip_range,  # noqa: E731
                                           config.adv_clip_max).mean() / scale
    loss = loss_of(advantages[rows, steps])
    step_grads = None
    if objective_advantages is None:
        loss.backward()
    else:
        losses = [loss_of(objective_advantages[rows, k]) for k in range(objective_advantages.shape[1])]
        if combiner is None:
            losses.append(loss)
        grads = _stacked_gradients(new_log_probs, losses, params)  # [K(+1), P]
        step_grads = grads[:len(losses) - (combiner is None)]
        if combiner is None:
            _add_to_grads(params, grads[-1])
    ratio = torch.exp(new_log_probs.detach() - old_log_probs)
    return loss.item(), int(((ratio - 1).abs() > config.clip_range).sum()), step_grads


def _optimizer_step(optimizer: torch.optim.Optimizer, params: list, objective_grads: Optional[torch.Tensor],
                    combiner: Optional[MarbleCombiner], max_grad_norm: float) -> tuple[float, Optional[dict]]:
    """One update from the accumulated gradients; ``.grad`` is cleared after it.

    With ``objective_grads [K, P]`` (summed over the update's micro-batches) the combiner's update, if
    any, is added first, and the diagnostic compares each objective's gradient with the applied one.
    Returns the gradient norm before clipping to ``max_grad_norm``, and the diagnostic (or ``None``).
    """
    diagnostic = None
    if objective_grads is not None:
        if combiner is not None:
            _add_to_grads(params, combiner.combine(objective_grads))
        applied = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                             for p in params])
        diagnostic = conflict_diagnostic(objective_grads, applied)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, diagnostic


def _stacked_gradients(outputs: torch.Tensor, losses: list, params: list) -> torch.Tensor:
    """``[len(losses), P]``: the gradient of each loss (a function of ``outputs [m]``) w.r.t. ``params``,
    by one batched vector-Jacobian product through the model instead of one backward pass per loss."""
    coefficients = torch.stack([torch.autograd.grad(l, outputs, retain_graph=True)[0] for l in losses])  # [L, m]
    grads = torch.autograd.grad(outputs, params, grad_outputs=coefficients, is_grads_batched=True, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros((len(losses),) + p.shape)).reshape(len(losses), -1)
                      for g, p in zip(grads, params)], dim=1)


def _add_to_grads(params: list, flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        piece = flat[offset:offset + p.numel()].view_as(p)
        p.grad = piece.clone() if p.grad is None else p.grad + piece
        offset += p.numel()


def _trainable(model: TinyFlux) -> list:
    return [p for p in model.parameters() if p.requires_grad]


@dataclass
class ModeHistory:
    """What one GRPO run logged; per-iteration lists have ``grpo_steps`` entries."""

    mode: str
    train_rewards: list = field(default_factory=list)  # [iters][K] mean rollout reward
    step_weights: list = field(default_factory=list)  # [iters][T] mean TCD weight per step
    mixture: list = field(default_factory=list)  # [iters][K] mean MOCA mixture
    conflict_share: list = field(default_factory=list)  # [iters] samples whose objective advantages disagree in sign
    gradient_conflict: list = field(default_factory=list)  # [iters] share of updates with an objective's cosine < 0
    worst_cosine: list = field(default_factory=list)  # [iters] mean over updates of the worst objective's cosine
    objective_cosines: list = field(default_factory=list)  # [iters][K] mean cosine of each objective with the update
    loss: list = field(default_factory=list)
    clip_fraction: list = field(default_factory=list)
    eval_iterations: list = field(default_factory=list)  # iterations at which eval ran (0 = base)
    eval_rewards: list = field(default_factory=list)  # [n_eval][K] mean eval reward
    drift: list = field(default_factory=list)  # [n_eval] mean per-step Gaussian KL to the base model
    objective_timing: list = field(default_factory=list)  # [n_eval][K][T] decided on the eval rollout (credit.md 9.1)
    objective_step_weights: list = field(default_factory=list)  # [iters][K][T] timed variants: the weights used (9.3)


def train_mode(base_model: TinyFlux, config: DemoConfig, variant: Variant, seed: int, eval_set: EvalSet,
               base_eval_means: list, on_iteration: Optional[Callable[[], None]] = None,
               base_timing: Optional[list] = None) -> tuple[TinyFlux, ModeHistory]:
    """GRPO from a copy of ``base_model`` under credit ``variant``; the base model is not touched.

    ``on_iteration`` is called after every iteration (progress reporting). ``base_timing [K][T]``: the
    base model's map on the evaluation set (the history's first entry). A variant with
    ``objective_timing="probe"`` scores every step's prediction of each batch and uses, at iteration
    n, the map pooled over the ``TIMING_WINDOW_BATCHES`` iterations before it (none at iteration 0).
    """
    model = copy.deepcopy(base_model)
    model.freeze_prompt_encoder()  # DanceGRPO trains on fixed prompt embeddings
    optimizer = torch.optim.AdamW(_trainable(model), lr=config.learning_rate, betas=(0.9, 0.999),
                                  weight_decay=config.weight_decay)
    history = ModeHistory(mode=variant.name, eval_iterations=[0], eval_rewards=[list(base_eval_means)], drift=[0.0],
                          objective_timing=[base_timing] if base_timing is not None else [])
    combiner = MarbleCombiner() if variant.gradient_combination == "marble" else None
    raw_scales = config.task_regime.raw_scales
    window = collections.deque(maxlen=REWARD_WINDOW_BATCHES)  # the rewards the engine saw, earlier iterations
    timed = variant.credit_config().uses_timing_map
    probes = collections.deque(maxlen=TIMING_WINDOW_BATCHES)  # the map's moments, earlier iterations
    for iteration in range(config.grpo_steps):
        batch = collect_batch(model, config, seed, iteration)
        timing_map = decided_from_moments(functools.reduce(operator.add, probes)) if probes else None
        credit, advantages = assign_credit(batch, variant, raw_scales, torch.cat(list(window)) if window else None,
                                           timing_map=timing_map)
        window.append(engine_rewards(variant, batch.rewards, raw_scales))
        if timed:
            probes.append(rollout_moments(batch.rollout, batch.prompt_ids, batch.group_ids, batch.rewards,
                                          config.image_size, config.objectives))
            history.objective_step_weights.append(credit.objective_step_weights.tolist())
        diagnose = config.conflict_diagnostic or combiner is not None
        stats = policy_update(model, optimizer, batch, advantages, config, seed, iteration,
                              objective_advantages=credit.objective_advantages if diagnose else None, combiner=combiner)
        summary = credit.summary()
        history.train_rewards.append(batch.rewards.mean(0).tolist())
        history.step_weights.append(summary["step_weight_mean_per_step"])
        history.mixture.append(combiner.weights.tolist() if combiner is not None else summary["mixture_mean_per_objective"])
        history.conflict_share.append(summary["conflict_share"])
        if stats["diagnostics"]:
            updates = stats["diagnostics"]
            history.gradient_conflict.append(sum(d["conflict"] for d in updates) / len(updates))
            history.worst_cosine.append(nanmean([d["worst"] for d in updates]))
            history.objective_cosines.append([nanmean(c) for c in zip(*(d["cosines"] for d in updates))])
        history.loss.append(stats["loss"])
        history.clip_fraction.append(stats["clip_fraction"])
        done = iteration + 1
        if done % config.eval_every == 0 or done == config.grpo_steps:
            result = evaluate(model, eval_set, config, reference=base_model)
            history.eval_iterations.append(done)
            history.eval_rewards.append(result.rewards.mean(0).tolist())
            history.drift.append(result.drift)
            history.objective_timing.append(result.timing)
        if on_iteration is not None:
            on_iteration()
    return model, history
