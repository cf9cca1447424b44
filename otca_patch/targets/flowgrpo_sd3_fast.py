"""FlowGRPO ``scripts/train_sd3_fast.py`` (9745241 on) — the runtime behind
``patches/flowgrpo/train_sd3_fast.toml``.

SD3's trainer (``flowgrpo_sd3``'s map holds) sampling an SDE window: ``pipeline_with_logprob`` from
``sd3_pipeline_with_logprob_fast`` picks, per call, a random window of ``sample.sde_window_size``
steps in ``sample.sde_window_range`` (noise level 0 outside it) and returns the window's
``latents`` (W+1 states), ``log_probs`` and ``timesteps`` only; ``num_train_timesteps`` is the
window's size (``num_steps - 1`` without a window), and column j trains the window's step j.

hook ``watch_rollout`` (module level): each sampling call's every step is seen (the pipeline
    module's ``sde_step_with_logprob``), so the whole trajectory (S+1 states) is known.
hook ``collect_rollout`` (after the rewards are submitted): the batch's TCD progress over all S
    steps and its window's first step, where the window's latents upstream keeps lie in it.
hook ``per_step_advantages``: the credit over the whole trajectory; each row's column j is its
    advantage at step ``window start + j``. Everything else as in SD3.
"""
from __future__ import annotations

from .descriptor import Target
from .flowgrpo_window import WindowedFlowRuntime


class Sd3FastRuntime(WindowedFlowRuntime):
    """FlowGRPO's SD3-Fast trainer: the family's windowed runtime does it all."""


TARGET = Target("flowgrpo-sd3-fast", Sd3FastRuntime, outputs=("logs", "checkpoints"),
                smoke="otca_patch.smoke.flowgrpo_sd3_fast", smoke_objectives=("jpeg_compressibility", "clip_t"))
