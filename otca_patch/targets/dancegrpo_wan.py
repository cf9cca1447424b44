"""DanceGRPO ``fastvideo/train_grpo_wan_2_1.py`` — the runtime behind ``patches/dancegrpo/train_grpo_wan_2_1.toml``.

A map of the upstream file and of what each hook point does there:

``sample_reference_model``  rolls out B videos one at a time, decodes each with the Wan VAE, writes it
    to ``./videos/wan_2_1_<rank>_<index>.mp4`` and scores HPSv2.1 on its first frame (re-read from the mp4).
    hook ``collect_decoded_videos``: keep each decoded video ``[F, H, W, 3]`` and its caption, so registry
    objectives score the batch once, after the rollout: image rewards (CLIP-T, aesthetic, HPS, ...) on
    ``--otca_video_frames`` evenly spaced frames, averaged per video; video rewards (VideoAlign) on the video.
``train_one_step``  builds ``samples`` (the last of S steps dropped: S-1 columns), computes group
    advantages ``[B]``, permutes each sample's steps with ``perms``, trains the first
    ``int((S-1) * timestep_fraction)`` columns with the PPO-clipped loss, and every
    ``gradient_accumulation_steps`` samples clips the gradient norm and steps the optimizer.
    hook ``per_step_advantages``: both ``samples["advantages"] = advantages`` assignments go through
    ``assign_advantages``: the ``[B, K]`` rewards (``upstream`` = upstream's first-frame HPS) and TCD's
    progress on ``all_latents`` are gathered over ranks, the credit is computed once, and this rank's
    ``[B, S-1]`` advantage is stored as ``samples["otca_advantages"]``; ``samples["advantages"]`` becomes
    the combined ``[B]`` value so upstream's prints keep working.
    hook ``permute_advantages_with_steps``: ``"otca_advantages"`` joins the permuted keys.
    hook ``record_step_order``: remember ``perms`` (the original step of each trained column).
    hook ``read_step_advantage``: the PPO loss reads ``sample["otca_advantages"][:, _]``.
    hook ``synchronise_gradients``: before upstream's ``clip_grad_norm_``, with ``--otca_sync_grads``,
    every gradient is averaged over ranks. Upstream's ``main`` wraps the transformer in neither FSDP nor
    DDP, so without it each rank steps on its own gradient and the replicas drift apart.
    Without the flag the hook does nothing: vanilla stays vanilla.
module level  hook ``log_each_step``: ``train_one_step`` is wrapped to write one run-log line per call.
``main``  loads ``WanTransformer3DModel`` from ``<pretrained>/transformer``, optionally applies gradient
    checkpointing to its ``WanTransformerBlock``s, trains it without FSDP/DDP, and every
    ``checkpointing_steps`` saves ``transformer.state_dict()`` (rank 0) into ``checkpoint-<step>-<epoch>/``.
    hook ``load_experts`` (Wan2.2, ``--otca_wan22`` or a ``model_index.json`` with ``transformer_2``): the
    loaded transformer becomes an ``ExpertRouter`` of both experts (``targets/wan22.py``), before
    upstream's checkpointing, ``.train()`` and optimizer see it; Wan2.1 keeps upstream's transformer.
    hook ``save_experts``: Wan2.2 writes each expert in diffusers' layout under ``checkpoint-*/<expert>/``;
    Wan2.1 runs upstream's own ``save_file(cpu_state, weight_path)``.
"""
from __future__ import annotations

import torch

from .distributed import average_gradients
from .dancegrpo import GrpoRuntime, frames_to_tensor
from .wan22 import ExpertRouter, is_wan22_checkpoint, load_experts, save_experts


class WanRuntime(GrpoRuntime):
    """State of the layer inside one DanceGRPO Wan2.1 / Wan2.2 process (one rank)."""

    router = None  # the ExpertRouter of a Wan2.2 run

    # ---- hook: load_experts (main, after upstream loads the transformer)
    def load_experts(self, transformer: torch.nn.Module, args) -> torch.nn.Module:
        """Wan2.2: both experts behind one router; Wan2.1: upstream's transformer, untouched."""
        folder = args.pretrained_model_name_or_path
        if not (self.config.otca_wan22 or is_wan22_checkpoint(folder)):
            return transformer
        if not is_wan22_checkpoint(folder):
            raise ValueError(f"--otca_wan22: {folder}/model_index.json declares no transformer_2 (not Wan2.2-A14B)")
        self.config.otca_wan22 = True
        self.router = load_experts(transformer, folder, self.config.otca_wan22_train)
        return self.router

    # ---- hook: save_experts (main, rank 0, where upstream writes its checkpoint)
    def save_transformer(self, transformer, cpu_state: dict, save_dir: str, weight_path: str) -> None:
        if isinstance(transformer, ExpertRouter):
            save_experts(transformer, save_dir)
        else:
            from safetensors.torch import save_file

            save_file(cpu_state, weight_path)

    def probe_samples(self, decoded) -> list:
        """The objective-timing probe's decoded videos (``postprocess_video``: ``[b, F, H, W, 3]``) as
        the objectives take them: ``[F, 3, H, W]`` each (``collect_video``'s layout)."""
        return [frames_to_tensor(video) for video in decoded]

    def reset(self) -> None:
        super().reset()
        if self.router is not None:
            self.router.served.clear()

    def write_log(self, result) -> None:
        """Wan2.2: the record also says which expert served each trained column ``[B][n]`` (in
        training order) and which expert each sampled timestep went to."""
        if self.router is not None and self.record is not None:
            trained = [names for _, names, grad in self.router.served if grad]
            sampled = {t: name for steps, names, grad in self.router.served if not grad for t, name in zip(steps, names)}
            rows, columns = self.trained_steps.shape
            if len(trained) != rows * columns:
                raise ValueError(f"otca-patch: {len(trained)} training forwards for {rows}x{columns} trained steps")
            self.record["trained_experts"] = [[trained[r * columns + c][0] for c in range(columns)] for r in range(rows)]
            self.record["sampled_experts"] = {str(t): name for t, name in sorted(sampled.items(), reverse=True)}
        super().write_log(result)

    # ---- hook: synchronise_gradients (train_one_step, before clip_grad_norm_)
    def synchronise_gradients(self, model: torch.nn.Module) -> None:
        """With ``--otca_sync_grads``: every trainable gradient becomes its mean over ranks (what DDP would
        do, bucketed: ``distributed.average_gradients``), so the gradient norm is clipped and the step
        taken on the same gradient everywhere. A Wan2.2 expert that this rank's window never reached
        gets zeros where another rank has a gradient, so each expert's gradient is its own mean."""
        if self.config.otca_sync_grads:
            average_gradients(model.parameters())

