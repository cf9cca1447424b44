"""Wan2.2-A14B's two experts behind the one ``transformer`` DanceGRPO's Wan trainer holds.

Wan2.2-A14B (diffusers >= 0.35, ``WanPipeline``) is two Wan2.1-architecture transformers: the
high-noise expert ``transformer`` denoises timesteps ``t >= boundary_ratio * num_train_timesteps``,
the low-noise expert ``transformer_2`` the rest (``pipeline_wan.py``'s rule). ``ExpertRouter`` is one
``nn.Module`` holding both, so everything upstream does to its transformer (``.train()/.eval()``,
gradient checkpointing of every ``WanTransformerBlock``, ``parameters()`` for the optimizer and the
gradient clipping, ``state_dict()``) reaches both, and each forward goes to the expert owning its
timestep.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

EXPERTS = ("transformer", "transformer_2")


def is_wan22_checkpoint(folder: str | os.PathLike | None) -> bool:
    """Whether ``folder/model_index.json`` declares a second expert (``transformer_2``)."""
    index = Path(folder or "") / "model_index.json"
    return index.is_file() and bool((json.loads(index.read_text()).get("transformer_2") or [None])[0])


def boundary_timestep(folder: str | os.PathLike) -> float:
    """``boundary_ratio * num_train_timesteps`` of a Wan2.2 checkpoint folder, as ``WanPipeline`` computes it."""
    folder = Path(folder)
    ratio = json.loads((folder / "model_index.json").read_text()).get("boundary_ratio")
    if ratio is None:
        raise ValueError(f"--otca_wan22: {folder / 'model_index.json'} has no boundary_ratio")
    scheduler = folder / "scheduler" / "scheduler_config.json"
    steps = json.loads(scheduler.read_text()).get("num_train_timesteps", 1000) if scheduler.is_file() else 1000
    return float(ratio) * steps


class ExpertRouter(nn.Module):
    """``forward(hidden_states, timestep [B], ...)``: row i goes to ``transformer`` when
    ``timestep[i] >= boundary`` and to ``transformer_2`` otherwise; outputs are put back in row order.

    ``served``: one entry per call, ``(timesteps, experts, grad_enabled)``, for the run log.
    """

    def __init__(self, transformer: nn.Module, transformer_2: nn.Module, boundary: float):
        super().__init__()
        self.transformer, self.transformer_2, self.boundary = transformer, transformer_2, float(boundary)
        self.config = transformer.config  # upstream writes dict(transformer.config) beside its checkpoints
        self.served = []

    def expert_names(self, timestep) -> list[str]:
        """``timestep``: a ``[B]`` tensor or the host list of its values."""
        values = timestep.reshape(-1).tolist() if isinstance(timestep, torch.Tensor) else timestep
        return [EXPERTS[0] if t >= self.boundary else EXPERTS[1] for t in values]

    def forward(self, hidden_states, timestep, encoder_hidden_states, return_dict=True, **kwargs):
        # one host read of the [B] timesteps per call: which expert's kernels to launch is a host
        # decision (as in diffusers' WanPipeline, which compares t with the boundary on the host too)
        values = timestep.reshape(-1).tolist()
        names = self.expert_names(values)
        self.served.append((values, names, torch.is_grad_enabled()))
        if len(set(names)) == 1:
            expert = self.transformer if names[0] == EXPERTS[0] else self.transformer_2
            out = expert(hidden_states=hidden_states, timestep=timestep, encoder_hidden_states=encoder_hidden_states,
                         return_dict=False, **kwargs)[0]
        else:  # rows on both sides of the boundary in one call (upstream never makes one)
            out = None
            for expert, name in ((self.transformer, EXPERTS[0]), (self.transformer_2, EXPERTS[1])):
                rows = torch.tensor([i for i, n in enumerate(names) if n == name], device=hidden_states.device)
                part = expert(hidden_states=hidden_states[rows], timestep=timestep[rows],
                              encoder_hidden_states=encoder_hidden_states[rows], return_dict=False, **kwargs)[0]
                out = part.new_zeros((hidden_states.shape[0], *part.shape[1:])) if out is None else out
                out = out.index_put((rows,), part)
        if torch.is_grad_enabled() and not out.requires_grad:
            # a step of the frozen expert (--otca_wan22_train): upstream's loss.backward() still runs,
            # and nothing is trained by it
            out = out.detach().requires_grad_()
        return (out,) if not return_dict else {"sample": out}


def load_experts(transformer: nn.Module, folder: str, train: str = "both") -> ExpertRouter:
    """``transformer`` (the high-noise expert, loaded by upstream from ``folder/transformer``) and the
    low-noise expert loaded from ``folder/transformer_2`` the same way (class, dtype, device);
    ``train`` names the expert(s) whose parameters keep ``requires_grad`` (upstream's optimizer
    takes only those)."""
    second = type(transformer).from_pretrained(folder, subfolder=EXPERTS[1], torch_dtype=transformer.dtype)
    router = ExpertRouter(transformer, second.to(transformer.device), boundary_timestep(folder))
    router.train(transformer.training)
    for name in EXPERTS:
        if train not in ("both", name):
            getattr(router, name).requires_grad_(False)
    return router


def save_experts(router: ExpertRouter, save_dir: str) -> None:
    """Each expert in diffusers' layout under ``save_dir/<expert>/`` (``diffusion_pytorch_model.safetensors``
    and ``config.json``), loadable as a Wan2.2 pipeline's ``transformer`` / ``transformer_2``."""
    for name in EXPERTS:
        getattr(router, name).save_pretrained(os.path.join(save_dir, name), safe_serialization=True)
