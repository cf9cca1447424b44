"""FlowGRPO ``scripts/train_flux.py`` (9745241) — the runtime behind ``patches/flowgrpo/train_flux.toml``.

The FLUX trainer is the SD3 skeleton (``flowgrpo.FlowGrpoRuntime``; the map of hook points is in
``flowgrpo_sd3``) with a FLUX pipeline: ``pipeline_with_logprob`` returns all ``S + 1`` states, so
``latents`` / ``next_latents`` are the whole trajectory TCD reads, and the loop trains columns
``0 .. T-1`` (``T = int(S * timestep_fraction)``) in sampling order. What differs from SD3:
no zero-advantage filter (every sample trains), no classifier-free guidance in training, and
``compute_log_prob(transformer, pipeline, sample, j, config)`` reads ``transformer.module`` (DDP).
"""
from __future__ import annotations

from .descriptor import Target
from .flowgrpo import FlowGrpoRuntime


class FluxRuntime(FlowGrpoRuntime):
    """FlowGRPO's FLUX trainer follows the FlowGRPO skeleton: the family runtime does it all."""


TARGET = Target("flowgrpo-flux", FluxRuntime, outputs=("logs", "checkpoints"), smoke="otca_patch.smoke.flowgrpo_flux",
                smoke_objectives=("jpeg_compressibility", "clip_t"))
