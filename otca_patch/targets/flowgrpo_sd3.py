"""FlowGRPO ``scripts/train_sd3.py`` — the runtime behind ``patches/flowgrpo/train_sd3.toml``.

A map of the upstream file and of what each hook point does there. Everything happens in
``main(_)``, run as ``__main__`` through absl by every process ``accelerate launch`` starts:

setup  builds the ``Accelerator``, then ``set_seed(config.seed, device_specific=True)``.
    hook ``bind_objectives`` (just before the seed): the ``--otca_rewards`` names are matched to
    ``config.reward_fn``'s keys (upstream's rewards) or loaded as registry models on
    ``accelerator.device``; loading before upstream seeds keeps vanilla's random stream intact.
sampling  per batch: ``pipeline_with_logprob`` gives ``images [b, 3, H, W]``, ``latents`` (S+1
    states, noise first) and ``log_probs [b, S]``; ``multi_score`` is submitted to a thread pool.
    hook ``collect_images``: keep the batch's images and prompts (registry objectives only).
advantages  ``samples`` collates the batches (``latents`` / ``next_latents [B, S, ...]``, the
    ``rewards`` dictionary, ``prompt_ids``); ``avg`` is repeated to ``[B, T]`` (T =
    ``num_train_timesteps``), gathered, normalised per prompt (``PerPromptStatTracker`` over the
    decoded gathered prompts) or globally, and split back:
    ``advantages.reshape(num_processes, -1, T)[process_index]``.
    hook ``per_step_advantages`` (right after that split): rewards ``[B, K]`` from the dictionary
    (and the registry), TCD's ``delta_s [B, S]`` from this process's latents, and a prompt key
    ``[B]`` are gathered (nothing larger travels), the credit is computed over the gathered batch
    (the same on every process), and this process's rows (rank-major, as upstream splits) of its
    first T steps replace ``samples["advantages"]``.
filter  samples whose advantages are all zero are dropped (on the advantages above).
    hook ``zero_advantage_filter``: upstream's mask; in ``sum`` mode the mask of upstream's own
    advantages, so exactly vanilla's rows train (its ``+ 1e-4`` leaves ~1e-13 in constant groups).
    hook ``record_kept_samples``: log the mask.
training  for each batch, ``j = 0 .. T-1`` in order, the PPO loss reads ``sample["advantages"][:, j]``
    (so step j trains with OTCA's advantage of step j; upstream's clamp and ratio clip apply).
    hooks ``watch_trained_step`` / ``read_step_advantage``: in the first epoch, each step's latents
    fingerprint (stored with the advantages, so upstream's filter, shuffle and re-batching move it
    with them) must match the latents ``compute_log_prob(..., sample, j, ...)`` just trained when
    column j's advantage is read, or the run stops with a ``PatchError`` before its first optimizer step.
    hook ``record_loss``: the epoch's mean loss for the log.
end of epoch  hook ``log_each_epoch`` (before ``epoch += 1``): one run-log line per epoch and process.
"""
from __future__ import annotations

from .descriptor import Target
from .flowgrpo import FlowGrpoRuntime


class Sd3Runtime(FlowGrpoRuntime):
    """FlowGRPO's SD3 trainer follows the FlowGRPO skeleton: the family runtime does it all."""


TARGET = Target("flowgrpo-sd3", Sd3Runtime, outputs=("logs", "checkpoints"), smoke="otca_patch.smoke.flowgrpo_sd3",
                smoke_objectives=("jpeg_compressibility", "clip_t"))
