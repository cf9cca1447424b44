"""What DanceGRPO's trainers share (``fastvideo/train_grpo_*.py``): decoded samples kept during the
rollout, groups laid out by ``--num_generations``, the ``[B, S-1]`` advantage permuted with the steps,
and one run-log line per ``train_one_step`` call.

Every DanceGRPO trainer has the same skeleton: ``sample_reference_model`` rolls out and decodes,
``train_one_step`` builds ``samples`` (the last of S steps dropped), sets
``samples["advantages"] = advantages`` (``[B]``), permutes each sample's steps with ``perms`` and
trains the first ``int((S-1) * timestep_fraction)`` columns with the PPO-clipped loss. The hook
methods below are what a spec for such a trainer calls; a target whose trainer follows the skeleton
needs no runtime code of its own (its spec names ``otca_patch.targets.dancegrpo:GrpoRuntime``).
"""
from __future__ import annotations

import time

import torch

from . import rank_check
from ..credit import similarity_to_final, step_progress
from .distributed import world
from .invariants import TrainedStepCheck
from .base import Runtime

#: the samples key of the per-step advantage ``[B, S-1]``, permuted with the steps
STEP_KEY = "otca_advantages"


class GrpoRuntime(Runtime):
    """State of the layer inside one DanceGRPO process (one rank)."""

    INTERNAL = Runtime.INTERNAL | {"assign_per_step", "group_ids", "progress", "rewards", "write_log", "final_state",
                                   "rebind_upstream", "probe_samples"}
    #: DanceGRPO's loop logs ``wandb.log({...}, step=step)`` after ``train_one_step`` returns
    upstream_logs_step = "next"
    #: False for a trainer whose own flags choose its rewards (``rebind_upstream`` at its first step)
    rewards_known_at_install = True

    def __init__(self, config, spec):
        super().__init__(config, spec)
        self.step_check = TrainedStepCheck()
        self.upstream_functions = {}
        # before upstream builds its models: a bad checkpoint stops the run early
        self.bind_objectives(check_weights=self.rewards_known_at_install)

    def reset(self) -> None:
        super().reset()
        self.trained_steps = None
        self.samples, self.prompts = [], []
        self.final_predictions = []

    def rebind_upstream(self, upstream_rewards, weights=None) -> bool:
        """For a trainer whose rewards are known only when it runs (its own flags choose its reward
        models): bind the objectives to ``upstream_rewards`` (registry models stay loaded) and, unless
        ``--otca_objective_weights`` was given, weigh each upstream objective by ``weights[its key]``
        (registry objectives: 1). Returns whether anything changed (the first call, or new rewards)."""
        import dataclasses

        key = (upstream_rewards.columns, upstream_rewards.plain, None if weights is None else tuple(weights.items()))
        if getattr(self, "_bound_upstream", None) == key:
            return False
        self._bound_upstream = key
        self.bind_objectives(upstream_rewards)
        if weights is not None and self.config.otca_objective_weights is None:
            keys = self.objectives.keys
            mapped = tuple(float(weights.get(keys.get(name), 1.0)) for name in self.objectives.names)
            self.credit_config = dataclasses.replace(self.credit_config, objective_weights=mapped)
        return True

    # ---- hook: collect_final_prediction (the sampler, after each rollout chunk)
    def collect_final_prediction(self, prediction: torch.Tensor) -> None:
        """Keep the last step's predicted clean sample ``[b, ...]`` of one rollout chunk (what
        upstream decodes and scores): TCD's ``z_T`` with ``--otca_final_state prediction`` (spec 1.7).
        Only targets whose spec has this hook take the flag (their spec lists it in `flags`)."""
        if self.config.otca_final_state == "prediction":
            self.final_predictions.append(prediction.detach())

    def final_state(self, all_latents: torch.Tensor):
        """TCD's explicit final state ``[B, ...]`` (None: the last latent, the default)."""
        if self.config.otca_final_state != "prediction":
            return None
        expected = (all_latents.shape[0],) + tuple(all_latents.shape[2:])
        final = torch.cat(self.final_predictions) if self.final_predictions else None
        if final is None or tuple(final.shape) != expected:
            raise RuntimeError(f"--otca_final_state prediction: collect_final_prediction gave "
                               f"{None if final is None else tuple(final.shape)} for latents of one state "
                               f"{expected}; the sampler hook no longer matches this trainer")
        return final.to(all_latents.device)

    # ---- hooks: probe_step_predictions (the sampler's loop), probe_decode (after upstream decodes)
    def collect_step_prediction(self, prediction: torch.Tensor, index: int) -> None:
        """Step ``index``'s (0-based) predicted clean sample ``[b, ...]`` of the chunk being sampled:
        kept on a probe step for the objective-timing map (``timing_probe``)."""
        self.timing_probe.keep(prediction, index)

    def score_step_predictions(self, decode, captions, upstream_reward=None) -> None:
        """The chunk just decoded: its kept step predictions are decoded by ``decode`` (upstream's own
        decoding of its final latents, under its ``torch.autocast("cuda", bfloat16)``) and scored with each objective;
        ``upstream_reward(image, caption)``: upstream's own reward of one decoded image, where the spec
        can call it (under its ``torch.amp.autocast("cuda")``), else None (its row of the map stays undefined)."""
        # upstream's own contexts, as upstream writes them (a CPU stand-in that maps CUDA autocast to the
        # CPU's maps these the same way; without CUDA both are off, for upstream's lines and these alike)
        def decoded(x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return self.probe_samples(decode(x))

        def scored(images, rows):
            with torch.amp.autocast("cuda"):
                return torch.stack([torch.as_tensor(upstream_reward(image, captions[row])).float().reshape(-1)[0].cpu()
                                    for image, row in zip(images, rows)])

        self.timing_probe.score(decoded, captions, self.objectives, self.config.otca_video_frames,
                                upstream=scored if upstream_reward is not None else None)

    def probe_samples(self, decoded) -> list:
        """One decoded batch as the objectives take it (images: as upstream decodes them)."""
        return decoded

    def remember(self, function) -> None:
        """Keep an upstream module-level function that a spec's code in a function calls
        (``upstream_function(name)``): a function hook reads no module globals."""
        self.upstream_functions[function.__name__] = function

    def upstream_function(self, name: str):
        """The upstream function ``remember`` kept under ``name``."""
        return self.upstream_functions[name]

    # ---- hooks: collect_decoded_images / collect_decoded_videos (sample_reference_model)
    def collect_images(self, decoded_images, captions) -> None:
        """Keep a batch's decoded images (PIL images or ``[3, H, W]`` tensors in [0, 1]) and captions
        for the registry objectives, which score the whole batch once, after the rollout."""
        self.keep_samples(decoded_images, captions)
        if self.objectives.needs_images:
            self.samples.extend(decoded_images)
            self.prompts.extend(captions[:len(decoded_images)])

    def collect_video(self, decoded_video, captions) -> None:
        """Keep one decoded video (numpy ``[F, H, W, 3]`` in [0, 1], or F PIL frames) and its caption."""
        self.keep_samples([decoded_video], captions[:1])
        if self.objectives.needs_images:
            self.samples.append(frames_to_tensor(decoded_video))
            self.prompts.append(captions[0])

    def rewards(self, upstream, device) -> torch.Tensor:
        """``[B, K]`` rewards of every rollout (all decoded samples, in rollout order), on ``device``
        (the trainer's: registry models are placed there first)."""
        return self.objective_matrix(upstream, self.samples, device)

    # ---- hook: per_step_advantages (train_one_step)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, args):
        """Returns the value upstream stores in ``samples["advantages"]`` and sets ``samples["otca_advantages"]``."""
        rewards = self.rewards(samples.get("rewards"), all_latents.device)
        return self.assign_per_step(samples, all_latents, rewards, upstream_advantages, args)

    def assign_per_step(self, samples: dict, all_latents: torch.Tensor, rewards: torch.Tensor,
                        upstream_advantages: torch.Tensor, args, rows=None, **record):
        """The credit of one DanceGRPO rollout: stores the ``[B_kept, S-1]`` per-step advantage under
        ``STEP_KEY`` and returns the combined ``[B_kept]`` for ``samples["advantages"]`` (upstream's
        own in observe mode).

        all_latents ``[B, S+1, ...]`` and rewards ``[B, K]`` cover every rollout of this rank; the
        credit is computed over all of them (gathered over ranks, in their prompt groups), and only
        then are ``rows`` ``[B_kept]`` taken (best-of-n: the rollouts upstream kept, in its order;
        default all). ``record``: extra run-log fields."""
        per_rank = all_latents.shape[0]
        if rewards.shape[0] != per_rank:
            raise ValueError(f"otca-patch: {rewards.shape[0]} reward rows for {per_rank} rollouts")
        kept_steps = samples["log_probs"].shape[1]  # S-1: upstream drops the last step
        delta_s = self.progress(all_latents, self.final_state(all_latents))  # no copy of the latents
        every = torch.arange(per_rank, device=all_latents.device)
        steps = torch.arange(kept_steps, device=delta_s.device).expand(per_rank if rows is None else len(rows), -1)
        upstream_per_step = upstream_advantages.reshape(-1, 1).expand(-1, kept_steps).clone()
        local, trained = self.assign_credit(rewards, delta_s, self.group_ids(every, per_rank, args), steps,
                                            upstream_per_step, upstream_advantages, rows=rows,
                                            final_state=self.config.otca_final_state, **record)
        samples[STEP_KEY] = trained
        return self.choose(local["combined"], upstream_advantages)

    def progress(self, all_latents: torch.Tensor, final=None) -> torch.Tensor:
        """TCD's ``delta_s [B, S]`` float64 from the trajectories ``[B, S+1, ...]`` (computed where
        the latents are: only this travels between ranks); ``final [B, ...]``: an explicit ``z_T``.
        Reads the latents in place: never index them (``all_latents[rows]`` would copy the batch)."""
        return step_progress(similarity_to_final(all_latents, final=final).double())

    @staticmethod
    def group_ids(rows: torch.Tensor, per_rank: int, args) -> torch.Tensor:
        """DanceGRPO's layout: ``num_generations`` contiguous samples per prompt with ``--use_group``
        (groups never span ranks), else one group over the gathered batch (its global normalisation).

        rows ``[B]``: each sample's position in this rank's rollout of ``per_rank`` samples.
        """
        rank, _ = world()
        if getattr(args, "use_group", False):
            size = args.num_generations
            if per_rank % size:
                raise ValueError(f"--num_generations {size} does not divide the per-rank batch {per_rank}")
            return rows // size + rank * (per_rank // size)
        return torch.zeros_like(rows)

    # ---- hook: record_step_order (after upstream permutes each sample's steps)
    def record_order(self, samples: dict, perms: torch.Tensor, args) -> None:
        """perms[i][j] is the original step of column j; the first ``train_timesteps`` are trained."""
        train_timesteps = int(perms.shape[1] * args.timestep_fraction)
        self.trained_steps = perms[:, :train_timesteps]

    # ---- hooks: permute_advantages_with_steps, watch_trained_step (module level), read_step_advantage
    def permuted_keys(self, samples: dict, keys: list) -> list:
        """Upstream's permuted keys plus the per-step advantage and its steps' fingerprints."""
        return self.step_check.permuted_keys(samples, list(keys) + [STEP_KEY])

    def watch_trained_step(self, grpo_one_step):
        """Upstream's one-step function, watched so the first training step can check its columns."""
        self.step_check.spec = self.spec
        return self.step_check.watch(grpo_one_step)

    def step_advantage(self, sample: dict, column) -> torch.Tensor:
        """The advantage of the step trained in ``column`` (checked against it at the first step)."""
        return self.step_check.read(sample, column, STEP_KEY)

    # ---- hook: log_each_step (module level)
    def wrap_train_step(self, train_one_step):
        runtime = self

        def train_one_step_with_otca(*args, **kwargs):
            rank_check.ensure()  # before the rollout, should the trainer have built its group unseen
            runtime.reset()
            started = time.perf_counter()
            result = train_one_step(*args, **kwargs)
            runtime.step_seconds = time.perf_counter() - started
            runtime.step_check.end_step()
            runtime.write_log(result)
            return result

        train_one_step_with_otca.__wrapped__ = train_one_step
        return train_one_step_with_otca

    def write_log(self, result) -> None:
        loss, grad_norm = (tuple(result) + (None, None))[:2] if isinstance(result, tuple) else (result, None)
        timed = {"step_seconds": self.step_seconds} if self.timing_probe.active else {}  # the probe's share
        self.write_record(trained_steps=self.trained_steps, loss=loss, grad_norm=grad_norm, **timed)


def frames_to_tensor(video) -> torch.Tensor:
    """One decoded video as DanceGRPO's ``VideoProcessor.postprocess_video`` gives it (numpy
    ``[F, H, W, 3]`` in [0, 1], or a list of F PIL frames) -> float32 ``[F, 3, H, W]`` in [0, 1]."""
    if isinstance(video, (list, tuple)):
        import numpy as np

        video = np.stack([np.asarray(frame, dtype=np.float32) / 255.0 for frame in video])
    frames = torch.as_tensor(video).float()
    if frames.dim() != 4 or frames.shape[-1] != 3:
        raise ValueError(f"a decoded video must be [F, H, W, 3], got {tuple(frames.shape)}")
    return frames.permute(0, 3, 1, 2).clamp(0.0, 1.0).contiguous()
