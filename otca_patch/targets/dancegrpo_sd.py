"""DanceGRPO ``fastvideo/train_grpo_sd.py`` — the runtime behind ``patches/dancegrpo/train_grpo_sd.toml``.

A map of the upstream file (DDPO's structure: everything happens in ``main``, one epoch = one rollout
of ``sample.batch_size`` prompts x ``num_generations`` images per rank, then training on it):

sampling  ``pipeline_with_logprob`` (DDIM with ``eta``, classifier-free guidance) returns, per chunk of
    ``train.batch_size`` prompts, the images ``[b, 3, H, W]`` in [0, 1], the latents (a list of S+1
    ``[b, 4, h, w]``, x_T first, the final latent last, bfloat16 like the initial noise) and S DDIM
    log-probs; HPSv2 (or HPSv3) scores each image re-read from its saved JPEG.
    hook ``collect_decoded_images``: keep each chunk's images and prompts for registry objectives.
advantages  ``all_latents [B, S+1, 4, h, w]`` (chunks concatenated, sample-major); ``samples`` keeps S-1
    columns (the last step dropped); per-prompt group advantages only (``num_generations`` contiguous
    samples per prompt; groups never span ranks): ``samples["final_advantages"]`` is what trains.
    hook ``per_step_advantages``: the ``[B, K]`` rewards and TCD's progress on ``all_latents`` (the whole
    trajectory, not ``samples["latents"]``, which lacks the final latent) are gathered over ranks, the
    credit is computed once, this rank's ``[B, S-1]`` advantage goes to ``samples["otca_advantages"]``
    and ``final_advantages`` becomes the combined ``[B]`` value (upstream only prints it then).
training  for each inner epoch: each sample's columns are permuted by ``perms`` (again on top of the
    previous inner epoch's order), samples are re-batched by ``train.batch_size``, and the first
    ``int((S-1) * timestep_fraction)`` columns train under ``accelerator.accumulate``.
    hooks ``permute_advantages_with_steps`` / ``record_step_order`` / ``read_step_advantage``: as in the
    FLUX trainer; the order is composed over inner epochs, so ``trained_steps`` are original steps.
    hooks ``record_loss`` / ``record_grad_norm`` / ``log_each_epoch``: the epoch's mean loss and last
    clipped gradient norm, then one run-log line per epoch and rank.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from .dancegrpo import GrpoRuntime


class SdRuntime(GrpoRuntime):
    """State of the layer inside one DanceGRPO Stable Diffusion process (one rank)."""

    #: the epoch's record is written after upstream's last ``accelerator.log(info, step=global_step)``
    upstream_logs_step = "current"

    def reset(self) -> None:
        super().reset()
        self.order, self.loss_sum, self.loss_count, self.grad_norm = None, 0.0, 0, None

    # ---- hook: collect_decoded_images
    def collect_images(self, decoded_images: torch.Tensor, captions) -> None:
        """decoded_images: one chunk's ``[b, 3, H, W]`` in [0, 1] (``output_type="pt"``, bf16 under autocast)."""
        super().collect_images(decoded_images.detach().float(), captions)

    # ---- hook: per_step_advantages
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, config):
        """Returns what upstream stores in ``samples["final_advantages"]``; sets ``samples["otca_advantages"]``.
        Groups: ``config.num_generations`` contiguous samples per prompt (upstream's only branch)."""
        layout = SimpleNamespace(use_group=True, num_generations=config.num_generations)
        return super().assign_advantages(samples, all_latents, upstream_advantages, layout)

    # ---- hook: record_step_order (once per inner epoch)
    def record_order(self, samples: dict, perms: torch.Tensor, train_config) -> None:
        """Column j now holds the column ``perms[:, j]`` of the previous order: compose, then keep the
        first ``int((S-1) * timestep_fraction)`` original steps (appended per inner epoch)."""
        self.order = perms if self.order is None else self.order.gather(1, perms)
        trained = self.order[:, :int(perms.shape[1] * train_config.timestep_fraction)]
        self.trained_steps = trained if self.trained_steps is None else torch.cat([self.trained_steps, trained], 1)

    # ---- hooks: record_loss, record_grad_norm, log_each_epoch
    def record_loss(self, loss: torch.Tensor) -> None:
        self.loss_sum += float(loss.detach())
        self.loss_count += 1

    def record_grad_norm(self, norm):
        self.grad_norm = norm
        return norm

    def end_epoch(self) -> None:
        """One run-log line: the epoch's mean upstream loss and its last clipped gradient norm."""
        self.write_record(trained_steps=self.trained_steps, loss=self.loss_sum / max(self.loss_count, 1),
                          grad_norm=None if self.grad_norm is None else float(self.grad_norm))
        self.reset()
