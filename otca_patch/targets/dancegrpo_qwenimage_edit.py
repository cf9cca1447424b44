"""DanceGRPO ``fastvideo/train_grpo_qwenimage_edit.py`` — the runtime behind ``patches/dancegrpo/train_grpo_qwenimage_edit.toml``.

The Qwen-Image trainer (see ``dancegrpo_qwenimage``) with a conditioning image per prompt: its VAE
latents (from the dataset, repeated per generation) are packed and concatenated to the noisy latents
as the transformer's input, and the prediction is cut back to the noisy tokens. ``all_latents`` holds
only the sampled (edited) image's latents ``[B, S+1, L, 64]``, never the conditioning image's, so TCD's
progress is the edit's own; the decoded image that upstream scores (``./images/qwenimage_<rank>_<index>.png``)
is the edited one, and registry objectives score it against the caption (the edit instruction). Every
hook does what it does in ``dancegrpo_flux``.
"""
from __future__ import annotations

from .dancegrpo import GrpoRuntime
from .descriptor import Target


class QwenImageEditRuntime(GrpoRuntime):
    """This trainer follows the DanceGRPO skeleton: the family runtime does it all."""


TARGET = Target("dancegrpo-qwenimage-edit", QwenImageEditRuntime, outputs=("images", "reward.txt"), flags=("otca_final_state",),
                smoke="otca_patch.smoke.dancegrpo_qwenimage_edit", smoke_objectives=("upstream", "clip_t"))
