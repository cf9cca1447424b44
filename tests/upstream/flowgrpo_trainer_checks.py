"""The checks every FlowGRPO trainer of 9745241 (FLUX, FLUX-Fast, Qwen-Image, ...) passes on its real
``main()``. A trainer's test file subclasses ``FlowTrainerChecks`` and sets what differs.

Expected values never come from the layer's log: the rollouts (every state the sampler passed
through, the images, the prompts and upstream's own reward dict) are recorded by the test probe
(``flowgrpo_probe.py``); upstream's advantages are recomputed from the rewards upstream returned
(its ``PerPromptStatTracker``: population std + 1e-4, by decoded prompt), TCD's progress from the
recorded states, the registry objective by scoring the recorded images.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress

from .conftest import REPO
from .flowgrpo_checks import UPSTREAM_NORMALISATION
from .image_trainer_checks import progress_from_latents


def upstream_advantages(avg: torch.Tensor, prompts: list) -> torch.Tensor:
    """FlowGRPO's per-prompt advantage over the gathered batch, float64: ``(r - mean) / (std + 1e-4)``
    with the population std of the samples sharing a prompt text."""
    out = torch.empty_like(avg, dtype=torch.float64)
    for prompt in set(prompts):
        rows = torch.tensor([p == prompt for p in prompts])
        group = avg[rows].double()
        out[rows] = (group - group.mean()) / (group.std(unbiased=False) + 1e-4)
    return out


class FlowTrainerChecks:
    target = ""  # smoke target name
    upstream_file = ""  # the trainer, inside the checkout
    nproc = 2  # processes of every run (contract.py's launcher)
    upstream_reward = "jpeg_compressibility"  # the smoke config's multi_score reward
    reward_weight = 2.0  # its weight in upstream's avg
    loss_rtol = 1e-4

    sampling_steps = 4  # S of every run
    trained_columns = 3  # trainers without a window: int(S * timestep_fraction 0.75), in order
    window = 0  # SDE-window trainers: sde_window_size

    def trained_steps(self, trajectory: torch.Tensor, noise_levels: torch.Tensor) -> torch.Tensor:
        """``[b, T]`` the sampling step of each trained column, from the recorded rollout: its states
        ``[b, S+1, ...]`` (every state, ODE steps included) and each step's noise level ``[S]``: without
        a window, SDE steps throughout and the first T trained; with one, its steps are the noisy ones."""
        assert trajectory.shape[1] == self.sampling_steps + 1
        if not self.window:
            assert bool((noise_levels > 0).all())
            return torch.arange(self.trained_columns).expand(trajectory.shape[0], -1)
        window = torch.nonzero(noise_levels > 0).flatten()
        assert window.tolist() == list(range(int(window[0]), int(window[0]) + self.window))
        return window.expand(trajectory.shape[0], -1)

    def registry_scores(self, model, images: torch.Tensor, prompts: list) -> torch.Tensor:
        """``[B]`` float64: a registry model's scores of the recorded samples (images here)."""
        return model.score(images, prompts).reshape(-1).double()

    # ---- runs (shared with the contract suite: contract.py launches them)
    @pytest.fixture(scope="class")
    def runs(self, target_runs):
        return target_runs(self.target)

    def per_rank(self, run, name: str) -> list:
        return [json.loads((run.out / f"smoke_rank{rank}.json").read_text())[name] for rank in range(self.nproc)]

    def trained(self, run) -> list:
        return [tuple(self.per_rank(run, key)[rank] for key in ("losses", "grad_norms", "weights_digest"))
                for rank in range(self.nproc)]

    def rollouts(self, run) -> list:
        return [torch.load(run.out / f"terms_rank{rank}.pt", weights_only=False) for rank in range(self.nproc)]

    def epoch(self, recorded: dict, epoch: int, key: str):
        """The recorded ``key`` of training epoch ``epoch`` (1-based; one sampling batch per epoch)."""
        return recorded[key][epoch - 1]

    # ---- the checks
    def test_sum_mode_over_upstreams_weights_trains_upstreams_numbers(self, runs):
        vanilla = runs("vanilla")
        summed = runs("sum", "--otca", "--otca_mode", "sum", "--otca_rewards", self.upstream_reward,
                      "--otca_objective_weights", str(self.reward_weight), *UPSTREAM_NORMALISATION)
        recorded = self.rollouts(vanilla)
        for epoch in (1, 2):
            avg = torch.cat([self.epoch(r, epoch, "rewards")["avg"] for r in recorded])
            prompts = [p for r in recorded for p in self.epoch(r, epoch, "prompts")]
            expected = upstream_advantages(avg, prompts)
            assert expected.abs().max() > 0.1
            for rank in range(self.nproc):
                logged = torch.tensor(summed.record(epoch, rank)["advantages"], dtype=torch.float64)
                rows = expected.reshape(self.nproc, -1)[rank]
                assert torch.allclose(logged, rows[:, None].expand_as(logged), rtol=1e-5, atol=1e-5)
        for ours, theirs in zip(self.trained(summed), self.trained(vanilla)):
            assert ours[0] == pytest.approx(theirs[0], rel=self.loss_rtol, abs=1e-6)
            assert ours[1] == pytest.approx(theirs[1], rel=self.loss_rtol)

    def test_otca_advantages_are_the_credit_engine_on_recomputed_inputs(self, runs):
        from otca_patch.rewards import load, tiny

        run = runs("otca", "--otca")
        recorded = self.rollouts(run)
        clip_t = load("clip_t", checkpoint=run.out / "tiny_rewards" / "clip" / "open_clip_model.safetensors",
                      model_name=tiny.register_tiny_open_clip(run.out / "tiny_rewards"))
        for epoch in (1, 2):
            records = [run.record(epoch, rank) for rank in range(self.nproc)]
            assert records[0]["objectives"] == [self.upstream_reward, "clip_t"]
            trajectories = [self.epoch(r, epoch, "trajectories") for r in recorded]
            noise_levels = [self.epoch(r, epoch, "noise_levels") for r in recorded]
            prompts = [p for r in recorded for p in self.epoch(r, epoch, "prompts")]
            upstream = torch.cat([self.epoch(r, epoch, "rewards")[self.upstream_reward] for r in recorded])
            images = torch.cat([self.epoch(r, epoch, "images") for r in recorded])
            rewards = torch.stack([upstream, self.registry_scores(clip_t, images, prompts)], dim=1)
            delta_s = torch.cat([progress_from_latents(t) for t in trajectories])
            first_seen = {}
            groups = torch.tensor([first_seen.setdefault(p, len(first_seen)) for p in prompts])
            credit = credit_from_progress(rewards, delta_s, groups, CreditConfig(**records[0]["config"]))
            batch = trajectories[0].shape[0]
            for rank, record in enumerate(records):
                rows = slice(rank * batch, (rank + 1) * batch)
                steps = self.trained_steps(trajectories[rank], noise_levels[rank])
                expected = credit.advantages[rows].double().gather(1, steps)
                logged = torch.tensor(record["advantages"], dtype=torch.float64)
                assert logged.shape == expected.shape
                assert torch.allclose(logged, expected, atol=1e-5)
                assert torch.allclose(torch.tensor(record["step_weights"], dtype=torch.float64),
                                      credit.step_weights[rows].double(), atol=1e-5)
                assert torch.allclose(torch.tensor(record["delta_s"], dtype=torch.float64), delta_s[rows], atol=1e-5)
            assert not torch.allclose(credit.advantages[:, 0], credit.advantages[:, 1])  # per step, not repeated

    def test_the_run_log_check_script_agrees(self, runs):
        run = runs("otca", "--otca")
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "check_run_log_credit.py"), str(run.out),
                               "--processes", str(self.nproc)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("match the credit engine") == 2
