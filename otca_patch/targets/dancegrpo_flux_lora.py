"""DanceGRPO ``fastvideo/train_grpo_flux_lora.py`` — the runtime behind ``patches/dancegrpo/train_grpo_flux_lora.toml``.

The LoRA trainer is the FLUX trainer with a peft LoRA (``to_q/to_k/to_v/to_out.0``) added to a frozen
transformer, FSDP wrapping peft's auto-wrap policy, no EMA (``train_one_step`` takes no ``ema_handler``)
and HPSv3 offered beside HPSv2.1 and PickScore. ``sample_reference_model`` and ``train_one_step`` are the
FLUX trainer's line for line, so every hook point and what it does there is the FLUX runtime's
(see ``dancegrpo_flux``), all of it in the family runtime ``dancegrpo.GrpoRuntime``: decoded images kept for registry objectives, the ``[B, S-1]`` OTCA advantage
from all objectives and TCD's progress on ``all_latents`` (gathered over ranks), permuted with the
steps, read by the PPO loss per trained step, one run-log line per ``train_one_step``. Only the LoRA
parameters receive the gradient; the layer does not touch which parameters train.
"""
from __future__ import annotations

from .dancegrpo import GrpoRuntime
from .descriptor import Target


class FluxLoraRuntime(GrpoRuntime):
    """This trainer follows the DanceGRPO skeleton: the family runtime does it all."""


TARGET = Target("dancegrpo-flux-lora", FluxLoraRuntime, outputs=("images", "reward.txt"), flags=("otca_final_state",),
                smoke="otca_patch.smoke.dancegrpo_flux_lora", smoke_objectives=("upstream", "clip_t"))
