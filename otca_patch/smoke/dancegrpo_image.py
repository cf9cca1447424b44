"""The smoke run the DanceGRPO image trainers with a ``train_one_step`` share (FLUX LoRA, Qwen-Image,
Qwen-Image-Edit): run folder, tiny HPSv2, the upstream module (rewritten with the layer's flags),
seeded models, and ``train_one_step`` called with its own parameter names."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import torch

from ..config import OtcaConfig
from .environment import smoke_device
from .harness import (call_by_signature, enter_run_folder, finish, inputs_on_device, load_upstream,
                      on_device, optimizer_and_schedule, report_step)


def run_image_trainer(upstream_dir: Path, out_dir: Path, config: OtcaConfig, reward_root: Path, probe,
                      upstream_file: str, sizes, args: argparse.Namespace, build_transformer: Callable,
                      build_vae: Callable, inputs_for: Callable) -> dict:
    """``sizes.steps`` calls of upstream's ``train_one_step``. ``build_transformer()`` gives the wrapped
    model, ``inputs_for(rank, step)`` the arguments that come from upstream's data loader."""
    rank, world_size = enter_run_folder(out_dir, "images")  # upstream writes ./images/*.png, ./reward.txt

    from ..rewards import tiny

    reward_root.mkdir(parents=True, exist_ok=True)
    hps_checkpoint = tiny.build_hpsv2(reward_root)
    module = load_upstream(upstream_dir.resolve(), upstream_file, config, f"dancegrpo_{Path(upstream_file).stem}")
    recorder = probe(module, log_prob_index=2) if probe else None  # all_log_probs: result[2]

    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = build_transformer()
    vae = on_device(build_vae().eval())
    from .dancegrpo_flux import upstream_hps_reward

    reward_model, tokenizer, preprocess_val = upstream_hps_reward(hps_checkpoint, tiny.TINY_HPS_ARCH)
    reward_model = on_device(reward_model)
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    common = {"args": args, "device": smoke_device(), "transformer": transformer, "vae": vae,
              "reward_model": reward_model, "tokenizer": tokenizer, "optimizer": optimizer,
              "lr_scheduler": lr_scheduler, "noise_scheduler": None, "max_grad_norm": 1.0,
              "preprocess_val": preprocess_val, "ema_handler": None}
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds

    steps = []
    for step in range(1, sizes.steps + 1):
        loss, grad_norm = call_by_signature(module.train_one_step, {**common, **inputs_on_device(inputs_for(rank, step))})
        steps.append(report_step(rank, step, loss, grad_norm))
    return finish(out_dir, config, rank, world_size, steps, recorder)
