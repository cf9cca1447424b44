"""Runs against a real upstream checkout: ``OTCA_UPSTREAM_<NAME>``, the git submodule
``upstream/<name>``, or the pinned snapshot in ``../shared/upstream/`` (see upstream_snapshots.py).
Without one a test skips with the reason, and fails under CI. Smoke runs go through
``python -m otca_patch.smoke`` (under torchrun / ``accelerate launch -m``), as a user runs them."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import upstream_snapshots as snapshots
from upstream_snapshots import upstream_checkout

REPO = Path(__file__).resolve().parents[2]
SMOKE = ["-m", "otca_patch.smoke"]  # run from REPO, so the checkout's package is the one imported


def require_upstream_packages() -> None:
    missing = [m for m in ("peft", "liger_kernel", "einops", "wandb", "cv2", "decord")
               if importlib.util.find_spec(m) is None]
    if missing:
        snapshots.missing(f"the upstream trainer needs {', '.join(missing)}: pip install -e '.[upstream]'")


@pytest.fixture(scope="session")
def dancegrpo() -> Path:
    require_upstream_packages()
    return upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", "fastvideo/train_grpo_flux.py")


class SmokeRun:
    """One finished smoke run: smoke.json, the run log (if any), the recorded loss terms."""

    def __init__(self, out: Path, completed: subprocess.CompletedProcess):
        self.out, self.completed = out, completed
        self.result = json.loads((out / "smoke.json").read_text()) if (out / "smoke.json").exists() else None
        log = out / "run_log.jsonl"
        self.log = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        self.terms = {int(p.stem.removeprefix("terms_rank")): torch.load(p, weights_only=True)
                      for p in out.glob("terms_rank*.pt")}

    @property
    def losses(self):
        return [s["loss"] for s in self.result["steps"]]

    @property
    def grad_norms(self):
        return [s["grad_norm"] for s in self.result["steps"]]


def run_smoke(upstream: Path, out: Path, *flags: str, env: dict | None = None, nproc: int = 1,
              check: bool = True) -> SmokeRun:
    command = [sys.executable, *SMOKE, str(upstream), str(out), *flags]
    if nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                   "--master_port", str(29700 + os.getpid() % 200), *SMOKE, str(upstream), str(out), *flags]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900,
                               env={**os.environ, **(env or {})}, cwd=REPO)
    if check and completed.returncode != 0:
        raise AssertionError(f"smoke run failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    return SmokeRun(out, completed)


def ppo_terms(run, trained_steps, advantages, step_weights=None, gas=4, clip_range=1e-4, adv_clip_max=5.0,
              rows=None):
    """Upstream's PPO loss of the first training step, term by term, rebuilt from the recorded
    log-probs: max(-A r, -A clip(r)) / (gas * train_timesteps) per (sample, trained column), with
    A = clamp(advantage * step weight, +-adv_clip_max). advantages ``[B]``; trained_steps ``[B, T]``;
    rows: the rollouts the trained rows came from (best-of-n), default all in order."""
    terms = run.terms[0]
    old = terms["rollout_log_probs"][0].double()  # [B, S], first step only
    old = old if rows is None else old[rows]
    new = torch.stack(terms["new_log_probs"]).double()  # calls in order: sample-major, then column
    batch, train_timesteps = trained_steps.shape
    new = new[:batch * train_timesteps].reshape(batch, train_timesteps)
    ratio = torch.exp(new - old.gather(1, trained_steps))
    weights = torch.ones_like(ratio) if step_weights is None else step_weights.gather(1, trained_steps)
    adv = (advantages[:, None] * weights).clamp(-adv_clip_max, adv_clip_max)
    clipped = ratio.clamp(1 - clip_range, 1 + clip_range)
    return torch.maximum(-adv * ratio, -adv * clipped) / (gas * train_timesteps)


# ---- FlowGRPO (scripts/train_sd3.py under accelerate)

@pytest.fixture(scope="session")
def flow_grpo() -> Path:
    missing = [m for m in ("ml_collections", "absl", "peft", "wandb") if importlib.util.find_spec(m) is None]
    if missing:
        snapshots.missing(f"FlowGRPO's trainer needs {', '.join(missing)}: pip install -e '.[flowgrpo]'")
    return upstream_checkout("flow_grpo", "OTCA_UPSTREAM_FLOW_GRPO", "scripts/train_sd3.py")


def accelerate_launch(nproc: int) -> list[str]:
    """FlowGRPO's launcher on this CPU machine: accelerate with gloo, 1 or ``nproc`` processes."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(nproc),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    if nproc > 1:
        command += ["--multi_gpu", "--main_process_port", str(29500 + os.getpid() % 400)]
    return command


class FlowSmokeRun:
    """One finished FlowGRPO smoke run: smoke.json of rank 0 (losses, grad norms, weights digest)
    and the run log's records by (step, rank)."""

    def __init__(self, out: Path, completed: subprocess.CompletedProcess):
        self.out, self.completed = out, completed
        self.result = json.loads((out / "smoke.json").read_text()) if (out / "smoke.json").exists() else None
        log = out / "run_log.jsonl"
        self.log = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def record(self, step: int, rank: int = 0) -> dict:
        return next(r for r in self.log if r["step"] == step and r["rank"] == rank)

    @property
    def trained(self):
        """What training did: every loss, every clipped gradient norm, the final trained weights."""
        return self.result["losses"], self.result["grad_norms"], self.result["weights_digest"]


def run_flowgrpo_smoke(upstream: Path, out: Path, *flags: str, nproc: int = 1, env: dict | None = None,
                       check: bool = True) -> FlowSmokeRun:
    command = [*accelerate_launch(nproc), *SMOKE, str(upstream), str(out), "--target", "flowgrpo-sd3", *flags]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900,
                               env={**os.environ, "WANDB_MODE": "disabled", **(env or {})}, cwd=REPO)
    if check and completed.returncode != 0:
        raise AssertionError(f"smoke run failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    return FlowSmokeRun(out, completed)


def cached_runs(make):
    """``get(name, *flags, **options)``: ``make(name, *flags, **options)`` once per name, then the
    same finished run, so the tests of a module compare runs made once."""
    made = {}

    def get(name, *flags, **options):
        if name not in made:
            made[name] = make(name, *flags, **options)
        return made[name]

    return get
