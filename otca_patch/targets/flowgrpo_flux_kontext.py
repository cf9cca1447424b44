"""FlowGRPO ``scripts/train_flux_kontext.py`` (9745241) — the runtime behind ``patches/flowgrpo/train_flux_kontext.toml``.

The FLUX trainer (``flowgrpo_flux``) conditioned on an input image: the loader yields the edit
prompts, the input images and ``prompt_with_image_paths``; ``prompt_ids`` tokenise the latter, so
upstream's groups (and the layer's, decoded from the same ids) are prompt-and-image pairs. The
sampler returns every state and the input image's latents; the loop trains columns ``0 .. T-1``.
Upstream's ``multi_score`` gets the input images too (``image_similarity``); the registry
objectives score the edited images with their edit prompts.
"""
from __future__ import annotations

from .descriptor import Target
from .flowgrpo import FlowGrpoRuntime


class FluxKontextRuntime(FlowGrpoRuntime):
    """FLUX-Kontext follows the FlowGRPO skeleton: the family runtime does it all."""


TARGET = Target("flowgrpo-flux-kontext", FluxKontextRuntime, outputs=("logs", "checkpoints"),
                smoke="otca_patch.smoke.flowgrpo_flux_kontext", smoke_objectives=("jpeg_compressibility", "clip_t"))
