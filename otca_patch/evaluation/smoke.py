"""``otca-patch eval --smoke``: the inputs of an end-to-end CPU evaluation, written with tiny, randomly
initialised models (a tiny FLUX pipeline, a base-weight and a perturbed DanceGRPO-layout checkpoint,
the five image rewards' tiny checkpoints) under ``OUT/smoke_inputs``; the evaluation then runs as
any other, through the same validation, cache and table."""
from __future__ import annotations

import argparse
from pathlib import Path

PROMPTS = ("a red circle on a white background", "a blue square in the snow", "a green star at night")


def smoke_arguments(args: argparse.Namespace) -> argparse.Namespace:
    import torch

    from ..rewards import tiny
    from ..tiny_models.flux import build_tiny_flux, save_dancegrpo_checkpoint, tiny_transformer

    given = [f"--{name}" for name in ("base", "checkpoint", "prompts") if getattr(args, name)]
    if given or args.reward_ckpt or args.reward_opt:
        raise ValueError(f"--smoke builds its own models and prompts; leave out {', '.join(given) or '--reward_*'}")
    root = Path(args.out) / "smoke_inputs"
    base = build_tiny_flux(root / "flux")
    outputs = root / "outputs"
    if not outputs.is_dir():
        trained = tiny_transformer(0)
        with torch.no_grad():
            generator = torch.Generator().manual_seed(1)
            for parameter in trained.parameters():
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
        save_dancegrpo_checkpoint(trained, outputs, step=10)
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    # tiny checkpoints; registers the tiny open_clip / hpsv2 architectures in this process
    checkpoints, options = tiny.build_all(root / "rewards")
    args = argparse.Namespace(**vars(args))
    args.base, args.checkpoint, args.prompts = base, ["base", str(outputs)], prompts
    args.rewards = tuple(checkpoints)
    args.reward_ckpt = [{name: str(path) for name, path in checkpoints.items()}]
    args.reward_opt = [{name: {k: str(v) for k, v in entries.items()} for name, entries in options.items() if entries}]
    args.num_steps, args.height, args.width, args.max_sequence_length = 2, 32, 32, 16
    args.batch_size, args.device, args.dtype = 2, "cpu", "fp32"
    return args
