"""HPSv2 on the CPU: upstream's own model code (hpsv2's open_clip) on a tiny architecture and checkpoint
(``rewards.tiny``), where upstream loads ViT-H-14 (1B parameters) onto CUDA."""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch


def upstream_hps_reward(checkpoint: Path, arch: str):
    """HPSv2 as upstream's ``main`` builds it (hpsv2's open_clip + the ``{'state_dict'}`` file), on the
    tiny architecture the checkpoint was written with."""
    from hpsv2.src import open_clip as hps_open_clip

    model, _, preprocess_val = hps_open_clip.create_model_and_transforms(
        arch, None, precision="fp32", device="cpu", jit=False, force_quick_gelu=False, force_custom_text=False,
        force_patch_dropout=False, force_image_size=None, pretrained_image=False, image_mean=None,
        image_std=None, light_augmentation=True, aug_cfg={}, output_dict=True, with_score_predictor=False,
        with_region_predictor=False)
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"])
    return model.eval(), hps_open_clip.get_tokenizer(arch), preprocess_val


@contextlib.contextmanager
def cpu_replacements(hps_arch: str):
    """The two calls of DanceGRPO's SD trainer that cannot run here, replaced while its ``main`` runs:
    ``create_model_and_transforms('ViT-H-14', './hps_ckpt/open_clip_pytorch_model.bin', ...)`` builds the
    tiny architecture without a pretrained file; ``torch.load(cp, map_location='cuda')`` loads onto the CPU."""
    from hpsv2.src import open_clip as hps_open_clip

    create, load = hps_open_clip.create_model_and_transforms, torch.load

    def create_tiny(model_name, pretrained=None, *args, **kwargs):
        return create(hps_arch, None, *args, **kwargs)

    def load_on_cpu(*args, **kwargs):
        if str(kwargs.get("map_location", "")).startswith("cuda"):
            kwargs["map_location"] = "cpu"
        return load(*args, **kwargs)

    hps_open_clip.create_model_and_transforms, torch.load = create_tiny, load_on_cpu
    try:
        yield
    finally:
        hps_open_clip.create_model_and_transforms, torch.load = create, load
