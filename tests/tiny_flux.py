"""A DanceGRPO-layout checkpoint of the tiny FLUX transformer, beside the tiny FLUX pipeline folder
(``otca_patch.smoke.tiny_flux``, which the SkyReels smoke run uses too): what ``otca-patch eval`` is
tested with on a CPU."""
from __future__ import annotations

import json
from pathlib import Path

from otca_patch.smoke.tiny_flux import build_tiny_flux, tiny_transformer

__all__ = ["build_tiny_flux", "save_dancegrpo_checkpoint", "tiny_transformer"]


def save_dancegrpo_checkpoint(transformer, output_dir: str | Path, step: int, epoch: int = 0) -> Path:
    """The on-disk result of DanceGRPO's ``save_checkpoint`` (fastvideo/utils/checkpoint.py):
    ``checkpoint-<step>-<epoch>/diffusion_pytorch_model.safetensors`` (the full state dict) and
    ``config.json`` (``dict(transformer.config)`` without ``dtype``)."""
    from safetensors.torch import save_file

    folder = Path(output_dir) / f"checkpoint-{step}-{epoch}"
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in transformer.state_dict().items()},
              str(folder / "diffusion_pytorch_model.safetensors"))
    config = dict(transformer.config)
    config.pop("dtype", None)
    (folder / "config.json").write_text(json.dumps(config, indent=4))
    return folder
