"""Run DanceGRPO's real FLUX LoRA ``train_one_step`` on the CPU with tiny models it builds.

The model is set up as upstream's ``main`` sets it up: a tiny ``FluxTransformer2DModel`` frozen, a
peft ``LoraConfig`` (``init_lora_weights=True`` on ``to_k/to_q/to_v/to_out.0``) added with
``add_adapter``, ``_no_split_modules`` and peft's ``fsdp_auto_wrap_policy`` from upstream's
``get_dit_fsdp_kwargs(..., use_lora=True)``, real FSDP in a gloo world (without ``sync_module_states``,
which needs a GPU). The rest (tiny VAE, tiny
HPSv2, prompts, seeding) is the FLUX smoke run's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from . import dancegrpo_flux as flux
from .dancegrpo_image import run_image_trainer

UPSTREAM_FILE = "fastvideo/train_grpo_flux_lora.py"
LORA_TARGETS = ["to_k", "to_q", "to_v", "to_out.0"]  # upstream's main


@dataclass
class Sizes(flux.Sizes):
    """The FLUX smoke sizes plus the adapter's (upstream's launch: rank 128, alpha 256, lr 3e-4)."""

    learning_rate: float = 3e-3  # LoRA B starts at zero: a larger step makes the second step differ
    lora_rank: int = 4
    lora_alpha: int = 8


def lora_transformer(sizes: Sizes) -> torch.nn.Module:
    """Upstream's main: frozen transformer + LoRA adapter, wrapped in FSDP with the LoRA policy."""
    from peft import LoraConfig
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from fastvideo.utils.fsdp_util import get_dit_fsdp_kwargs

    from . import environment

    transformer = flux.tiny_transformer()
    transformer.requires_grad_(False)
    transformer.add_adapter(LoraConfig(r=sizes.lora_rank, lora_alpha=sizes.lora_alpha, init_lora_weights=True,
                                       target_modules=LORA_TARGETS))
    with environment.cpu_as_current_device():
        fsdp_kwargs, no_split_modules = get_dit_fsdp_kwargs(transformer, "full", True, False, "fp32")
        transformer._no_split_modules = [module.__name__ for module in no_split_modules]
        fsdp_kwargs["auto_wrap_policy"] = fsdp_kwargs["auto_wrap_policy"](transformer)
        # FSDP's sync_module_states broadcasts from GPU memory only; every rank here builds the same
        # seeded weights, so there is nothing to synchronise (docs/dancegrpo.md: DanceGRPO's environment)
        fsdp_kwargs["sync_module_states"] = False
        return FSDP(transformer, **fsdp_kwargs)


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path, probe=None) -> dict:
    loaders = {}

    def inputs_for(rank: int, step: int) -> dict:  # one loader per rank, advanced by each step
        return {"loader": loaders.setdefault(rank, flux.prompt_loader(rank, sizes.seed))}

    args = flux.upstream_args(sizes)
    args.use_hpsv3 = False  # the LoRA trainer also offers HPSv3; its launch script uses HPSv2.1
    return run_image_trainer(upstream_dir, out_dir, config, reward_root, probe, UPSTREAM_FILE, sizes, args,
                             lambda: lora_transformer(sizes), flux.tiny_vae, inputs_for)
