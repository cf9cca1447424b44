"""The smoke run every DanceGRPO image trainer with a ``train_one_step`` shares (FLUX, FLUX LoRA,
Qwen-Image, Qwen-Image-Edit): run folder, tiny HPSv2, the upstream module (rewritten with the layer's
flags), seeded models, and ``train_one_step`` called with its own parameter names."""
from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Callable

import torch

from ..config import OtcaConfig
from .harness import TermRecorder, enter_run_folder, finish, load_upstream, optimizer_and_schedule, report_step


def upstream_hps_reward(checkpoint: Path, arch: str):
    """HPSv2 as upstream's ``main`` builds it (hpsv2's open_clip + the ``{'state_dict'}`` file),
    on the tiny architecture the checkpoint was written with."""
    from hpsv2.src import open_clip as hps_open_clip

    model, _, preprocess_val = hps_open_clip.create_model_and_transforms(
        arch, None, precision="fp32", device="cpu", jit=False, force_quick_gelu=False, force_custom_text=False,
        force_patch_dropout=False, force_image_size=None, pretrained_image=False, image_mean=None,
        image_std=None, light_augmentation=True, aug_cfg={}, output_dict=True, with_score_predictor=False,
        with_region_predictor=False)
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"])
    return model.eval(), hps_open_clip.get_tokenizer(arch), preprocess_val


def call_by_signature(function: Callable, arguments: dict):
    """``function`` called with the ``arguments`` it names (e.g. ``ema_handler`` only where it exists)."""
    names = inspect.signature(function).parameters
    missing = [name for name in names if name not in arguments]
    if missing:
        raise ValueError(f"smoke: {function.__qualname__} takes {', '.join(missing)}, which the smoke run does not give")
    return function(**{name: arguments[name] for name in names})


def run_image_trainer(upstream_dir: Path, out_dir: Path, config: OtcaConfig, reward_root: Path, record_terms: bool,
                      upstream_file: str, sizes, args: argparse.Namespace, build_transformer: Callable,
                      build_vae: Callable, inputs_for: Callable) -> dict:
    """``sizes.steps`` calls of upstream's ``train_one_step``. ``build_transformer()`` gives the wrapped
    model, ``inputs_for(rank, step)`` the arguments that come from upstream's data loader."""
    rank, world_size = enter_run_folder(out_dir, "images")  # upstream writes ./images/*.png, ./reward.txt

    from ..rewards import tiny

    reward_root.mkdir(parents=True, exist_ok=True)
    hps_checkpoint = tiny.build_hpsv2(reward_root)
    module = load_upstream(upstream_dir.resolve(), upstream_file, config, f"dancegrpo_{Path(upstream_file).stem}")
    recorder = (TermRecorder(module, log_prob_index=2, rollout_fields={"rewards": 0, "latents": 1})
                if record_terms else None)

    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = build_transformer()
    vae = build_vae().eval()
    reward_model, tokenizer, preprocess_val = upstream_hps_reward(hps_checkpoint, tiny.TINY_HPS_ARCH)
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    common = {"args": args, "device": torch.device("cpu"), "transformer": transformer, "vae": vae,
              "reward_model": reward_model, "tokenizer": tokenizer, "optimizer": optimizer,
              "lr_scheduler": lr_scheduler, "noise_scheduler": None, "max_grad_norm": 1.0,
              "preprocess_val": preprocess_val, "ema_handler": None}
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds

    steps = []
    for step in range(1, sizes.steps + 1):
        loss, grad_norm = call_by_signature(module.train_one_step, {**common, **inputs_for(rank, step)})
        steps.append(report_step(rank, step, loss, grad_norm))
    return finish(out_dir, config, rank, world_size, steps, recorder)
