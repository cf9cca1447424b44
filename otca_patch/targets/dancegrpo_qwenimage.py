"""DanceGRPO ``fastvideo/train_grpo_qwenimage.py`` — the runtime behind ``patches/dancegrpo/train_grpo_qwenimage.toml``.

What differs from the FLUX trainer: the model (``QwenImageTransformer2DModel``, prompt embeddings cut to
each prompt's ``original_length``), the VAE (``AutoencoderKLQwenImage``, latents de-normalised by its
``latents_mean`` / ``latents_std``, a one-frame video decoded and its frame taken), the batch (prompts
come from ``main``'s loader, not from ``train_one_step``), bf16 FSDP mixed precision. What the hook
points see is the FLUX trainer's: ``sample_reference_model`` decodes and saves one PIL image per sample
(``./images/qwenimage_<rank>_<index>.png``) and scores HPSv2.1; ``train_one_step`` keeps S-1 of the
packed ``all_latents [B, S+1, L, 64]`` columns, computes both advantage branches, permutes the steps and
trains ``int((S-1) * timestep_fraction)`` of them. So every hook does what it does in ``dancegrpo_flux``:
registry objectives on the decoded images, the ``[B, S-1]`` credit from all objectives and TCD's
progress on ``all_latents`` (gathered over ranks), permuted with the steps, read per trained step, one
run-log line per ``train_one_step``.
"""
from __future__ import annotations

from .dancegrpo import GrpoRuntime
from .descriptor import Target


class QwenImageRuntime(GrpoRuntime):
    """This trainer follows the DanceGRPO skeleton: the family runtime does it all."""


TARGET = Target("dancegrpo-qwenimage", QwenImageRuntime, outputs=("images", "reward.txt"), flags=("otca_final_state",),
                smoke="otca_patch.smoke.dancegrpo_qwenimage", smoke_objectives=("upstream", "clip_t"))
