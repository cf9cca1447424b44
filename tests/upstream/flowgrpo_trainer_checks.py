"""The checks every FlowGRPO trainer of 9745241 (FLUX, FLUX-Fast, Qwen-Image, ...) passes on its real
``main()``. A trainer's test file subclasses ``FlowTrainerChecks`` and sets what differs.

Expected values never come from the layer's log: the rollouts (every state the sampler passed
through, the images, the prompts and upstream's own reward dict) are recorded by the test probe
(``flowgrpo_probe.py``); upstream's advantages are recomputed from the rewards upstream returned
(its ``PerPromptStatTracker``: population std + 1e-4, by decoded prompt), TCD's progress from the
recorded states, the registry objective by scoring the recorded images.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import upstream_snapshots as snapshots
from otca_patch.credit import CreditConfig, credit_from_progress

from .conftest import REPO, SMOKE, FlowSmokeRun, accelerate_launch, cached_runs, with_startup_hook
from .image_trainer_checks import progress_from_latents

PROBE = f"{Path(__file__).with_name('flowgrpo_probe.py')}:RolloutRecorder"
#: FlowGRPO's own normalisation: numpy's population std plus 1e-4
UPSTREAM_NORMALISATION = ["--otca_std_correction", "0", "--otca_adv_eps", "1e-4"]
NEWER_SNAPSHOT = "flow_grpo-9745241.tar.gz"


@pytest.fixture(scope="session")
def flow_grpo_newer() -> Path:
    """FlowGRPO at 9745241 (the commit these specs are verified on): ``OTCA_UPSTREAM_FLOW_GRPO_9745241``
    or the snapshot in ``../shared/upstream/``."""
    missing = [m for m in ("ml_collections", "absl", "peft", "wandb") if importlib.util.find_spec(m) is None]
    if missing:
        snapshots.missing(f"FlowGRPO's trainers need {', '.join(missing)}: pip install -e '.[flowgrpo]'")
    given = os.environ.get("OTCA_UPSTREAM_FLOW_GRPO_9745241")
    folder = Path(given) if given else snapshots.unpack_snapshot(NEWER_SNAPSHOT)
    if folder is None or not (folder / "scripts" / "train_flux.py").is_file():
        snapshots.missing(f"no FlowGRPO 9745241 checkout: set OTCA_UPSTREAM_FLOW_GRPO_9745241 or put "
                          f"../shared/upstream/{NEWER_SNAPSHOT} beside the repository")
    return folder.resolve()


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_port", str(29300 + os.getpid() % 200)]


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
    nproc = 2  # processes of every run
    launcher = "accelerate"  # or "torchrun", as upstream launches the trainer
    model_env = ""  # the variable naming the shared tiny pipeline folder
    sizes: tuple = ()  # smoke size flags of every run
    upstream_reward = "jpeg_compressibility"  # the smoke config's multi_score reward
    reward_weight = 2.0  # its weight in upstream's avg
    # breaks per_step_advantages, and nothing else: the same call without the assignment statement
    mutation = ('samples["advantages"] = (', 'samples.__setitem__("advantages", ')
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

    # ---- runs
    def launch(self, nproc: int) -> list:
        return accelerate_launch(nproc) if self.launcher == "accelerate" else torchrun(nproc)

    def python_path(self) -> list:
        """Folders the smoke processes import first (a newer transformers, for Qwen-Image)."""
        return []

    def run(self, upstream, out, *flags, env=None, check=True):
        command = [*self.launch(self.nproc), *SMOKE, str(upstream), str(out), "--target", self.target,
                   "--probe", PROBE, *self.sizes, *flags]
        env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", **(env or {})}
        if self.python_path():
            env["PYTHONPATH"] = os.pathsep.join([*self.python_path(), *filter(None, [env.get("PYTHONPATH")])])
        completed = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
        if check and completed.returncode != 0:
            raise AssertionError(f"smoke run failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
        return FlowSmokeRun(out, completed)

    @pytest.fixture(scope="class")
    def model(self, tmp_path_factory):
        return {self.model_env: str(tmp_path_factory.mktemp("flowgrpo_model") / "tiny")}

    @pytest.fixture(scope="class")
    def runs(self, flow_grpo_newer, model, tmp_path_factory):
        root = tmp_path_factory.mktemp(self.target)
        return cached_runs(lambda name, *flags, env=None: self.run(flow_grpo_newer, root / name, *flags,
                                                                   env={**model, **(env or {})}))

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
    def test_vanilla_parity_with_the_layer_present_but_not_asked_for(self, runs):
        vanilla = runs("vanilla")
        present = runs("present", env=with_startup_hook("--otca_mode tcd"))
        assert len(vanilla.result["losses"]) > 0
        assert self.trained(present) == self.trained(vanilla)
        assert not present.log

    def test_observe_mode_trains_bit_identically_and_logs_the_credit(self, runs):
        vanilla, observed = runs("vanilla"), runs("observe", "--otca_observe")
        assert self.trained(observed) == self.trained(vanilla)
        assert sorted((r["step"], r["rank"]) for r in observed.log) == [(s, r) for s in (1, 2) for r in range(self.nproc)]
        for record in observed.log:
            assert torch.equal(torch.tensor(record["advantages"]), torch.tensor(record["upstream_advantages"]))

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

    def test_a_mutated_upstream_file_stops_otca_and_doctor_reports_it(self, flow_grpo_newer, model, tmp_path):
        copy = tmp_path / "flow_grpo"
        for part in ("scripts", "config", "flow_grpo"):
            shutil.copytree(flow_grpo_newer / part, copy / part)
        trainer = copy / self.upstream_file
        source = trainer.read_text()
        anchor, mutated = self.mutation
        assert source.count(anchor) == 1
        trainer.write_text(source.replace(anchor, mutated))
        run = self.run(copy, tmp_path / "out", "--otca", env=model, check=False)
        assert run.completed.returncode != 0 and run.result is None and not run.log
        for part in (self.upstream_file, "function main", "per_step_advantages", "9745241cf1101407e9b518dd4f10498092150522"):
            assert part in run.completed.stderr, part
        doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(copy)], capture_output=True,
                                text=True, timeout=120, cwd=REPO)
        assert doctor.returncode == 1
        section = doctor.stdout.split(f"{self.target}: {self.upstream_file}")[1].split("\n\n")[0]
        assert "per_step_advantages" in section and "FAIL" in section

    def test_doctor_holds_on_the_verified_checkout(self, flow_grpo_newer):
        doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(flow_grpo_newer)],
                                capture_output=True, text=True, timeout=120, cwd=REPO)
        section = doctor.stdout.split(f"{self.target}: {self.upstream_file}")[1].split("\n\n")[0]
        assert "identical to the file the spec was verified on" in section and "FAIL" not in section
        assert f"{self.target} ({self.upstream_file}): holds" in doctor.stdout
