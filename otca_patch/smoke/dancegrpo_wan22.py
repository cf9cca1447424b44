"""Run DanceGRPO's real Wan ``train_one_step`` on a two-expert Wan2.2 checkpoint, on the CPU.

A tiny checkpoint in the Wan2.2-A14B layout is written locally (``WanPipeline.save_pretrained`` with
diffusers' real ``WanTransformer3DModel`` x2, ``AutoencoderKLWan``, a tiny UMT5 and
``boundary_ratio`` in ``model_index.json``). The experts are loaded as the hooked ``main`` of
``train_grpo_wan_2_1.py`` loads them: upstream's ``WanTransformer3DModel.from_pretrained(...,
subfolder="transformer")`` (float32 here: the CPU) and then the layer's ``load_experts`` hook (the
second expert, the router, the trainable parameters). Upstream's ``train_one_step`` then runs for real
as in the Wan2.1 smoke run, and the checkpoint is saved through the ``save_experts`` hook.
``smoke.json`` adds ``expert_update_norms`` (the norm of each expert's parameter change over the run).
Needs ``--otca`` or ``--otca_observe`` (upstream alone cannot load two experts).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ..config import OtcaConfig
from ..targets.wan22 import EXPERTS
from ..tiny_models.wan import build_tiny_wan22
from .dancegrpo import reward_inputs, train, trainer_named, wan_prompts
from .harness import cast_inputs_to_weights, enter_run_folder, finish, load_upstream, on_device, sizes_type

#: the Wan trainer's smoke (its spec's table), on the Wan2.2-A14B layout
WAN = trainer_named("dancegrpo-wan")
Sizes = sizes_type("dancegrpo-wan22", WAN.sizes, {"boundary_ratio": 0.875}, {})  # Wan2.2-T2V-A14B's boundary
upstream_args = WAN.upstream_args


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().reshape(-1) for p in module.parameters()])


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path,
        probe=None) -> dict:
    from diffusers import AutoencoderKLWan, WanTransformer3DModel

    if not config.active:
        raise ValueError("the Wan2.2 smoke run needs --otca or --otca_observe: upstream alone loads one transformer")
    upstream_dir = upstream_dir.resolve()  # before the chdir below
    rank, world_size = enter_run_folder(out_dir, "videos")
    reward_root.mkdir(parents=True, exist_ok=True)
    checkpoint = build_tiny_wan22(reward_root / f"Wan2.2-T2V-tiny-rank{rank}", sizes.boundary_ratio, sizes.seed)
    module = load_upstream(upstream_dir, WAN.smoke.file, config, "dancegrpo_train_grpo_wan22")
    runtime = module.__otca__
    recorder = probe(module, log_prob_index=2) if probe else None  # all_log_probs: result[2]

    args = upstream_args(sizes)
    args.pretrained_model_name_or_path = str(checkpoint)
    # what the hooked main does: upstream's load of `transformer`, then the load_experts hook
    transformer = WanTransformer3DModel.from_pretrained(str(checkpoint), subfolder="transformer", torch_dtype=torch.float32)
    transformer = runtime.load_experts(transformer, args)
    for expert in (transformer.transformer, transformer.transformer_2):
        cast_inputs_to_weights(expert)
    transformer = on_device(transformer)
    vae = on_device(AutoencoderKLWan.from_pretrained(str(checkpoint), subfolder="vae", torch_dtype=torch.float32).eval())
    gradients = GradientProbe(module, transformer) if probe else None
    before = {name: _flat(getattr(transformer, name)) for name in EXPERTS}
    steps = train(module, transformer, sizes, rank, out_dir, args, {"vae": vae, **reward_inputs(WAN.model, reward_root)},
                  wan_prompts(rank, sizes), replicas=True)
    norms = {name: float((_flat(getattr(transformer, name)) - before[name]).norm()) for name in EXPERTS}
    if rank == 0:  # upstream's checkpoint block, through the save_experts hook
        save_dir = out_dir / f"checkpoint-{sizes.steps}-0"
        os.makedirs(save_dir, exist_ok=True)
        runtime.save_transformer(transformer, transformer.state_dict(), str(save_dir),
                                 str(save_dir / "diffusion_pytorch_model.safetensors"))
    if gradients is not None:
        gradients.save(out_dir / f"gradients_rank{rank}.json")
    return finish(out_dir, config, rank, world_size, steps, recorder, sync_grads=config.otca_sync_grads,
                  boundary_ratio=sizes.boundary_ratio, expert_update_norms=norms)


class GradientProbe:
    """Test probe (not part of the layer): for each training forward (``grpo_one_step`` call), its
    timestep and the experts whose parameters then received a gradient in its backward."""

    def __init__(self, module, router):
        self.calls = []
        grpo = module.grpo_one_step

        def grpo_one_step(*args, **kwargs):
            self.calls.append({"timestep": int(args[6].reshape(-1)[0]), "experts": []})
            return grpo(*args, **kwargs)

        module.grpo_one_step = grpo_one_step
        for name in EXPERTS:
            for parameter in getattr(router, name).parameters():
                if parameter.requires_grad:
                    parameter.register_hook(self._record(name))

    def _record(self, name):
        def hook(grad):
            if self.calls and name not in self.calls[-1]["experts"] and bool(grad.abs().sum() > 0):
                self.calls[-1]["experts"].append(name)
            return grad
        return hook

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.calls))
