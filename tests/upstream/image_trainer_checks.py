"""The checks every DanceGRPO image trainer's target must pass on the real upstream step.

A trainer's test file subclasses ``ImageTrainerChecks`` (``class TestX(ImageTrainerChecks)``) and
sets the class attributes that describe its smoke target; the test methods here then run against
it. Expected values never come from the layer: upstream's advantages are recomputed from the
rewards upstream returned, TCD's progress from the latents upstream sampled (both recorded by the
smoke run's probe, not by the layer), the registry objective by scoring upstream's saved images.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress

from .conftest import TERM_PROBE, ppo_terms
from .contract import dancegrpo_runner, trainer_spec

#: the objectives of ``--otca`` alone in every image smoke target
DEFAULT_OBJECTIVES = ["upstream", "clip_t"]


def upstream_group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DanceGRPO's per-prompt advantage: ``(r - mean) / (std + 1e-8)`` over contiguous groups, float64."""
    groups = rewards.double().reshape(-1, group_size)
    return ((groups - groups.mean(dim=1, keepdim=True)) / (groups.std(dim=1, keepdim=True) + 1e-8)).reshape(-1)


def progress_from_latents(latents: torch.Tensor) -> torch.Tensor:
    """TCD's ``dS [B, S]`` written from the spec (1.1, 1.2) in float64: cosine of each flattened
    latent with the last one, differenced over steps. latents ``[B, S+1, ...]``."""
    flat = latents.double().flatten(2)
    final = flat[:, -1:]
    cosine = (flat * final).sum(-1) / (flat.norm(dim=-1) * final.norm(dim=-1)).clamp(min=1e-12)
    return cosine[:, 1:] - cosine[:, :-1]


class ImageTrainerChecks:
    """``sum`` == vanilla, TCD re-weighting, credit on recomputed inputs, 2 ranks == one process
    (vanilla parity, observe mode and a mutated copy: the contract suite, test_contract.py)."""

    target = ""  # smoke target name
    upstream_file = ""  # the trainer, inside the checkout
    group_size = 4  # num_generations of the smoke run
    timestep_fraction = 0.6
    ppo = {"gas": 4, "clip_range": 1e-4, "adv_clip_max": 5.0}  # what ppo_terms needs
    probe = None  # FILE.py:NAME of the smoke's test probe (None: conftest's term probe, via --record_terms)
    # sum mode vs vanilla: the credit engine's advantage differs from upstream's float32 one by rounding;
    # how far that moves what upstream reports depends on the trainer's precision
    grad_norm_rtol, grad_norm_steps = 1e-6, 2  # relative gap of the clipped gradient norms, over how many steps
    loss_rtol = 1e-6  # gap of upstream's reported loss to the rebuilt terms, relative to their size

    # ---- what differs between trainers
    def image_path(self, rank: int, index: int) -> str:
        """Where upstream saved sample ``index`` of ``rank``'s last rollout (relative to the run folder)."""
        raise NotImplementedError

    def images(self, run, rank: int, step: int, batch: int):
        """The images the registry objectives scored: by default upstream's saved files of the last step."""
        from PIL import Image

        return [Image.open(run.out / self.image_path(rank, index)).convert("RGB") for index in range(batch)]

    def prompts(self, rank: int, step: int, batch: int, world: int) -> list:
        """The caption of each of the ``batch`` samples of ``rank``'s rollout at ``step`` (the smoke's loader)."""
        raise NotImplementedError

    def rollout(self, run, rank: int = 0, step: int = 1) -> dict:
        """What upstream's rollout of ``step`` returned on ``rank`` (recorded by the smoke probe):
        rewards ``[B]`` and the sampled trajectories ``[B, S+1, ...]`` (one sampler call per sample)."""
        terms = run.terms[rank]
        batch = terms["rollout_log_probs"][step - 1].shape[0]
        latents = torch.cat(terms["trajectories"][(step - 1) * batch:step * batch])
        return {"rewards": terms["rollout_rewards"][step - 1], "latents": latents}

    def terms(self, run, trained: torch.Tensor, step_advantages: torch.Tensor) -> torch.Tensor:
        """Upstream's PPO loss of the first step per (sample, trained column), float64, with
        ``step_advantages [B, S-1]`` the advantage of each (sample, original step)."""
        args = SimpleNamespace(gradient_accumulation_steps=self.ppo["gas"], clip_range=self.ppo["clip_range"],
                               adv_clip_max=self.ppo["adv_clip_max"])
        return ppo_terms(run, args, trained, torch.ones(trained.shape[0], dtype=torch.float64),
                         step_weights=step_advantages.double())

    # ---- runs
    def run(self, upstream, out, *flags, **options):
        """A smoke run of this target outside the shared ones (contract.py's launcher)."""
        return dancegrpo_runner(trainer_spec(self.target), self.probe or TERM_PROBE)(upstream, out, *flags, **options)

    @pytest.fixture(scope="class")
    def runs(self, target_runs):
        return target_runs(self.target)

    def vanilla(self, runs):
        return runs("vanilla", "--steps", "2", "--record_terms")

    def otca(self, runs):
        return runs("otca", "--steps", "2", "--record_terms", "--otca")

    def vanilla_step_advantages(self, run, trained: torch.Tensor) -> torch.Tensor:
        advantages = upstream_group_advantages(self.rollout(run)["rewards"], self.group_size)
        return advantages[:, None].expand(-1, self.rollout(run)["latents"].shape[1] - 2)

    def recomputed_credit(self, run, records: dict, ranks=(0,)):
        """The credit engine over the samples of ``ranks`` at the run's last step, on inputs recomputed
        from upstream's rollout and saved images, never read from the layer's log."""
        from otca_patch.rewards import load, tiny

        step = records[ranks[0]]["step"]
        clip_t = load("clip_t", checkpoint=run.out / "tiny_rewards" / "clip" / "open_clip_model.safetensors",
                      model_name=tiny.register_tiny_open_clip(run.out / "tiny_rewards"))
        rewards, delta_s = [], []
        for rank in ranks:
            rollout = self.rollout(run, rank, step)
            batch = rollout["latents"].shape[0]
            scores = clip_t.score(self.images(run, rank, step, batch), self.prompts(rank, step, batch, len(ranks)))
            rewards.append(torch.stack([rollout["rewards"].double(), scores.reshape(-1).double()], dim=1))
            delta_s.append(progress_from_latents(rollout["latents"]))
        rewards, delta_s = torch.cat(rewards), torch.cat(delta_s)
        group_ids = torch.arange(rewards.shape[0]) // self.group_size
        return credit_from_progress(rewards, delta_s, group_ids, CreditConfig(**records[ranks[0]]["config"])), delta_s

    # ---- the checks
    def test_sum_mode_over_upstreams_reward_equals_vanilla(self, runs):
        vanilla = self.vanilla(runs)
        summed = runs("sum", "--steps", "2", "--record_terms", "--otca", "--otca_mode", "sum",
                      "--otca_rewards", "upstream")
        steps = self.grad_norm_steps
        assert summed.grad_norms[:steps] == pytest.approx(vanilla.grad_norms[:steps], rel=self.grad_norm_rtol)
        record = summed.log[0]
        trained = torch.tensor(record["trained_steps"])
        expected = self.vanilla_step_advantages(vanilla, trained)
        logged = torch.tensor(record["advantages"], dtype=torch.float64)
        assert torch.allclose(logged, expected, rtol=1e-6, atol=1e-7)
        # term by term in float64: a float32 sum of terms that cancel within a group says little
        ours, theirs = self.terms(summed, trained, logged), self.terms(vanilla, trained, expected)
        assert torch.allclose(ours, theirs, rtol=1e-6, atol=1e-12)
        assert summed.losses[0] == pytest.approx(ours.sum().item(), abs=self.loss_rtol * ours.abs().sum().item())

    def test_otca_loss_is_vanilla_loss_reweighted_by_the_logged_step_weights(self, runs):
        vanilla = self.vanilla(runs)
        tcd = runs("tcd", "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd", "--otca_rewards", "upstream")
        record = tcd.log[0]
        trained = torch.tensor(record["trained_steps"])
        weights = torch.tensor(record["step_weights"], dtype=torch.float64)[:, :-1]
        assert not torch.allclose(weights, torch.ones_like(weights)), "step weights are not all 1 here"
        first = len(tcd.terms[0]["new_log_probs"])  # same weights, noise and order: step 1 is bit-identical
        assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]),
                           torch.stack(vanilla.terms[0]["new_log_probs"][:first]))
        upstream = self.vanilla_step_advantages(vanilla, trained)
        vanilla_terms = self.terms(vanilla, trained, upstream)
        assert vanilla_terms.sum().item() == pytest.approx(vanilla.losses[0],
                                                           abs=self.loss_rtol * vanilla_terms.abs().sum().item())
        weighted = self.terms(vanilla, trained, upstream * weights)
        assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())
        tcd_terms = self.terms(tcd, trained, torch.tensor(record["advantages"], dtype=torch.float64))
        assert torch.allclose(tcd_terms, weighted, rtol=1e-5, atol=1e-12)
        unclamped = (upstream * weights).gather(1, trained).abs() < self.ppo["adv_clip_max"]
        assert torch.allclose(weighted[unclamped], (vanilla_terms * weights.gather(1, trained))[unclamped], rtol=1e-12)

    def test_logged_advantages_equal_the_credit_engine_on_recomputed_inputs(self, runs):
        otca = self.otca(runs)
        assert [r["step"] for r in otca.log] == [1, 2]
        record = otca.log[-1]
        assert record["objectives"] == DEFAULT_OBJECTIVES and record["mode"] == "otca"
        credit, delta_s = self.recomputed_credit(otca, {0: record})
        assert torch.allclose(torch.tensor(record["delta_s"], dtype=torch.float64), delta_s, atol=1e-5)
        kept = torch.tensor(record["advantages"], dtype=torch.float64)
        sampling_steps = delta_s.shape[1]
        assert kept.shape == (self.group_size, sampling_steps - 1)
        assert torch.allclose(kept, credit.advantages[:, :-1].double(), atol=1e-5)
        assert torch.allclose(torch.tensor(record["mixture"], dtype=torch.float64), credit.mixture.double(), atol=1e-5)
        trained = torch.tensor(record["trained_steps"])
        assert trained.shape == (self.group_size, int((sampling_steps - 1) * self.timestep_fraction))
        assert all(len(set(row)) == len(row) for row in trained.tolist()) and trained.max() < sampling_steps - 1

    def test_two_ranks_get_the_credit_one_process_would_give(self, dancegrpo, tmp_path):
        run = self.run(dancegrpo, tmp_path / "ranks", "--steps", "1", "--record_terms", "--otca", nproc=2)
        by_rank = {r["rank"]: r for r in run.log if r["step"] == 1}
        assert sorted(by_rank) == [0, 1] and by_rank[0]["world_size"] == 2
        assert [g for rank in (0, 1) for g in by_rank[rank]["group_ids"]] == [0] * 4 + [1] * 4
        credit, _ = self.recomputed_credit(run, by_rank, ranks=(0, 1))
        for rank in (0, 1):
            rows = slice(self.group_size * rank, self.group_size * (rank + 1))
            assert torch.allclose(torch.tensor(by_rank[rank]["advantages"], dtype=torch.float64),
                                  credit.advantages[rows, :-1].double(), atol=1e-5)
            assert by_rank[rank]["summary"] == pytest.approx(by_rank[0]["summary"])
