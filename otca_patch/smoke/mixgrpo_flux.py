"""Run MixGRPO's real FLUX ``train_one_step`` (its sampler, window, rewards aggregation, PPO + KL
loss) on the CPU with tiny models, vanilla or with the layer: a module of its own, for MixGRPO's
arguments (its training window, its reward models and their weights) differ from DanceGRPO's.

Replaced, and nothing else: the FLUX transformer, VAE and prompts are the DanceGRPO FLUX smoke's;
the reward models and the imports the trainer never calls are ``stand_ins.mixgrpo_rewards``'
(``flash_attn``: ``stand_ins.cpu``).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import types
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from ..stand_ins.mixgrpo_rewards import (REWARD_MODEL_SETS, WEIGHT_FLAGS, in_submission_order, reward_models,
                                         serve_endpoint, stand_in_imports)
from ..tiny_models.flux import flux_transformer, flux_vae
from .dancegrpo import flux_batches
from .harness import (RolloutSizes, call_by_signature, enter_run_folder, finish, fsdp_wrap, load_upstream,
                      optimizer_and_schedule, report_step)

UPSTREAM_FILE = "fastvideo/train_grpo_flux.py"
@dataclass
class Sizes(RolloutSizes):
    """The family's sizes and MixGRPO's options (finetune_flux_grpo_MixGRPO.sh's, made tiny)."""

    training_strategy: str = "part"  # 'part' (sliding SDE window) or 'all' (shuffled steps)
    multi_reward_mix: str = "advantage_aggr"  # or 'reward_aggr'
    reward_model: str = "multi_reward"
    advantage_rerange_strategy: str = "null"  # 'null', 'random', 'balance' (part only)
    window_size: int = 2  # MixGRPO's --group_size: steps in the SDE window
    iters_per_group: int = 1  # steps before the window moves
    trimmed_ratio: float = 0.0
    timestep_fraction: float = 0.6
    frozen_init_timesteps: int = -1
    kl_coeff: float = 0.0
    flow_grpo_sampling: bool = False
    dpm_algorithm_type: str = "null"  # 'dpmsolver++': the Flash variants
    dpm_post_compress_ratio: float = 0.4
    hps_weight: float = 1.0
    clip_score_weight: float = 1.0
    image_reward_weight: float = 1.0
    pick_score_weight: float = 1.0
    unified_reward_weight: float = 1.0
    clip_range: float = 1e-4
    adv_clip_max: float = 5.0
    eta: float = 0.7


def upstream_args(sizes: Sizes, url: str = "") -> argparse.Namespace:
    """What ``train_one_step`` reads, as the MixGRPO launch script sets it (gradient accumulation:
    one optimizer step per prompt)."""
    return argparse.Namespace(
        use_group=True, num_generations=sizes.num_generations, w=sizes.image_size, h=sizes.image_size, t=1,
        sampling_steps=sizes.sampling_steps, shift=sizes.shift, eta=sizes.eta, init_same_noise=True,
        training_strategy=sizes.training_strategy, multi_reward_mix=sizes.multi_reward_mix,
        reward_model=sizes.reward_model, advantage_rerange_strategy=sizes.advantage_rerange_strategy,
        trimmed_ratio=sizes.trimmed_ratio, timestep_fraction=sizes.timestep_fraction,
        frozen_init_timesteps=sizes.frozen_init_timesteps, kl_coeff=sizes.kl_coeff, clip_range=sizes.clip_range,
        adv_clip_max=sizes.adv_clip_max, gradient_accumulation_steps=sizes.num_generations,
        flow_grpo_sampling=sizes.flow_grpo_sampling, drop_last_sample=False,
        dpm_algorithm_type=sizes.dpm_algorithm_type, dpm_apply_strategy="post",
        dpm_post_compress_ratio=sizes.dpm_post_compress_ratio, dpm_solver_order=2, dpm_solver_type="midpoint",
        sample_strategy="progressive", output_dir="outputs", experiment_name="smoke", ignore_last=True,
        train_batch_size=1, unified_reward_url=url,
    )


def normalised_weights(models: list, sizes: Sizes) -> dict:
    """``reward_weights`` as MixGRPO's ``main`` builds them: per class name, divided by their sum."""
    weights = {type(m).__name__: float(getattr(sizes, WEIGHT_FLAGS[type(m).__name__])) for m in models}
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path, probe=None) -> dict:
    if sizes.reward_model not in REWARD_MODEL_SETS:
        raise ValueError(f"--reward_model {sizes.reward_model}: MixGRPO's choices are {', '.join(REWARD_MODEL_SETS)}")
    stand_in_imports()
    rank, world_size = enter_run_folder(out_dir, "outputs")
    module = load_upstream(upstream_dir.resolve(), UPSTREAM_FILE, config, "mixgrpo_train_grpo_flux")
    import fastvideo.models.reward_model.utils as reward_utils
    from fastvideo.utils.grpo_states import GRPOTrainingStates

    reward_utils.concurrent = types.SimpleNamespace(futures=types.SimpleNamespace(
        ThreadPoolExecutor=concurrent.futures.ThreadPoolExecutor, as_completed=in_submission_order))
    recorder = probe(module, log_prob_index=2) if probe else None  # all_log_probs: result[2]

    url = serve_endpoint()
    models = reward_models(REWARD_MODEL_SETS[sizes.reward_model], url)
    weights = normalised_weights(models, sizes)
    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = fsdp_wrap(flux_transformer())
    transformer.train()
    vae = flux_vae().eval()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    args = upstream_args(sizes, url)
    window = GRPOTrainingStates(iters_per_group=sizes.iters_per_group, group_size=sizes.window_size,
                                max_timesteps=sizes.sampling_steps - 2, sample_strategy="progressive",
                                prog_overlap=False, roll_back=True)
    loader = flux_batches(rank, sizes.seed)
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds

    steps = []
    for step in range(1, sizes.steps + 1):
        if sizes.training_strategy == "part":
            timesteps_train = window.get_current_timesteps()
            window.update_iteration()
        else:
            timesteps_train = list(range(sizes.sampling_steps))
        result = call_by_signature(module.train_one_step, dict(
            args=args, device=torch.device("cpu"), transformer=transformer, vae=vae, reward_models=models,
            optimizer=optimizer, lr_scheduler=lr_scheduler, loader=loader, noise_scheduler=None, max_grad_norm=1.0,
            timesteps_train=timesteps_train, global_step=step - 1, reward_weights=weights))
        steps.append(report_step(rank, step, result[0], result[1], window=list(timesteps_train),
                                 rewards=result[5]))
    return finish(out_dir, config, rank, world_size, steps, recorder, reward_weights=weights,
                  training_strategy=sizes.training_strategy, multi_reward_mix=sizes.multi_reward_mix)
