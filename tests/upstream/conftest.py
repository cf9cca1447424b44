"""Runs against a real upstream checkout: ``OTCA_UPSTREAM_<NAME>``, the git submodule
``upstream/<name>``, or the pinned snapshot in ``../shared/upstream/`` (see upstream_snapshots.py).
Without one a test skips with the reason, and fails under CI. Smoke runs go through
``python -m otca_patch.smoke`` (under torchrun / ``accelerate launch -m``), as a user runs them."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import upstream_snapshots as snapshots
from otca_patch.credit import CreditConfig, credit_from_progress
from free_port import free_port
from upstream_snapshots import newer_checkout, upstream_checkout

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


@pytest.fixture(scope="session")
def mixgrpo() -> Path:
    """MixGRPO's checkout (its FLUX trainer shares DanceGRPO's path and package name)."""
    require_upstream_packages()
    return upstream_checkout("MixGRPO", "OTCA_UPSTREAM_MIXGRPO", "fastvideo/train_grpo_flux.py")


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


#: the loss-term recorder the DanceGRPO smoke runs load for ``--record_terms`` (test-only code)
TERM_PROBE = f"{Path(__file__).with_name('term_probe.py')}:TermRecorder"


def run_smoke(upstream: Path, out: Path, *flags: str, env: dict | None = None, nproc: int = 1,
              check: bool = True) -> SmokeRun:
    """``--record_terms`` among ``flags`` loads ``TERM_PROBE`` into the run (``terms_rank<r>.pt``)."""
    flags = [part for flag in flags for part in (["--probe", TERM_PROBE] if flag == "--record_terms" else [flag])]
    command = [sys.executable, *SMOKE, str(upstream), str(out), *flags]
    if nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                   "--master_port", str(free_port()), *SMOKE, str(upstream), str(out), *flags]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900,
                               env={**os.environ, **(env or {})}, cwd=REPO)
    if check and completed.returncode != 0:
        raise AssertionError(f"smoke run failed ({completed.returncode}):\n{error_lines(completed.stderr)}"
                             f"{completed.stderr[-4000:]}")
    return SmokeRun(out, completed)


def error_lines(stderr: str) -> str:
    """Every exception line of every rank: with two ranks the tail holds the second failure only (a peer's
    'Connection closed by peer'), and the first, its cause, may lie further up."""
    errors = re.findall(r"^(?:\[rank\d+\]: )?\s*(?:[A-Za-z_][\w.]*(?:Error|Exception)|smoke: .*)\b.*$", stderr, re.M)
    return "".join(f"  {line.strip()[:400]}\n" for line in dict.fromkeys(errors)) + ("---- the end of stderr:\n" if errors else "")


def doctor(checkout: Path) -> subprocess.CompletedProcess:
    """``otca-patch doctor CHECKOUT`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def refused_mutation(checkout: Path, folder: Path, upstream_file: str, anchor: str, replacement: str, *flags: str,
                     stderr: tuple = (), failing: str = ""):
    """Copy ``checkout``'s ``fastvideo/`` into ``folder``, replace the one ``anchor`` in ``upstream_file``,
    and check that the smoke run with ``--otca`` (and ``flags``) stops before its rollout naming
    ``stderr``'s parts, and that doctor fails there with ``failing`` (a hook point) among its FAIL rows.
    Returns (the smoke run, doctor's result) for a trainer's own checks."""
    copy = folder / checkout.name
    import shutil

    shutil.copytree(checkout / "fastvideo", copy / "fastvideo")
    trainer = copy / upstream_file
    source = trainer.read_text()
    assert source.count(anchor) == 1, f"{upstream_file} no longer has exactly one {anchor!r}"
    trainer.write_text(source.replace(anchor, replacement, 1))
    run = run_smoke(copy, folder / "out", *flags, "--otca", check=False)
    assert run.completed.returncode == 2 and run.result is None, run.completed.stderr[-2000:]
    for part in (upstream_file, *stderr):
        assert part in run.completed.stderr, part
    checked = doctor(copy)
    assert checked.returncode == 1
    assert failing in checked.stdout and "FAIL: anchor" in checked.stdout
    return run, checked


def with_startup_hook(flags: str) -> dict:
    """The environment of a process that ``scripts/otca_run.sh`` started with ``flags``: the startup
    hook on PYTHONPATH (this checkout's package behind it) and the flags in ``$OTCA_PATCH_ARGS``."""
    from otca_patch.env_names import ARGS
    from otca_patch.launch.preflight import STARTUP_DIR

    return {ARGS: flags, "PYTHONPATH": os.pathsep.join([str(STARTUP_DIR), str(REPO)])}


def ppo_terms(run, args, trained_steps, advantages, step_weights=None, rows=None, clip_range=None,
              adv_clip_max=None):
    """Upstream's PPO loss of the first training step, term by term in float64, rebuilt from the
    recorded log-probs: max(-A r, -A clip(r)) / (gas * train_timesteps) per (sample, trained column),
    with A = clamp(advantage * step weight, +-adv_clip_max). args: the upstream arguments the smoke
    run passed (its ``upstream_args``: gradient accumulation, clip range, advantage clip; a trainer
    that fixes the last two in its code gets them as ``clip_range`` / ``adv_clip_max``).
    advantages ``[B]``; trained_steps ``[B, T]``; rows: the rollouts the trained rows came from
    (best-of-n), default all in order."""
    clip_range = args.clip_range if clip_range is None else clip_range
    adv_clip_max = args.adv_clip_max if adv_clip_max is None else adv_clip_max
    gas = args.gradient_accumulation_steps
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


def assert_tcd_reweights_vanilla(vanilla, tcd, args, **clips):
    """TCD's first step (``tcd``: ``--otca_mode tcd`` on upstream's reward) trains upstream's PPO loss
    of that step (rebuilt from ``vanilla``'s recorded log-probs), each term's advantage times the
    logged step weight of the step it trains. Returns (the weighted terms, vanilla's terms, the
    weights of the trained steps) for a trainer's own checks."""
    record = tcd.log[0]
    trained = torch.tensor(record["trained_steps"])
    upstream_adv = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    weights = torch.tensor(record["step_weights"], dtype=torch.float64)
    # same weights, prompts, noise and step order: the new log-probs of step 1 are bit-identical
    first = len(tcd.terms[0]["new_log_probs"])
    assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]), torch.stack(vanilla.terms[0]["new_log_probs"][:first]))
    vanilla_terms = ppo_terms(vanilla, args, trained, upstream_adv, **clips)
    assert vanilla_terms.sum().item() == pytest.approx(vanilla.losses[0], abs=1e-6 * vanilla_terms.abs().sum().item())
    weighted = ppo_terms(vanilla, args, trained, upstream_adv, weights, **clips)
    assert not torch.allclose(weights, torch.ones_like(weights)), "step weights are not all 1 here"
    assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())
    return weighted, vanilla_terms, weights.gather(1, trained)


def assert_logged_credit(run, objectives: list, group_size: int = 4) -> None:
    """Each record of a two-step ``--otca`` run: its objectives and mode, and its advantages and step
    weights the credit engine's on the record's own inputs (rewards, progress, groups, options)."""
    assert [r["step"] for r in run.log] == [1, 2]
    for record in run.log:
        assert record["objectives"] == objectives and record["mode"] == "otca"
        credit = credit_from_progress(torch.tensor(record["rewards"]), torch.tensor(record["delta_s"]),
                                      torch.tensor(record["group_ids"]), CreditConfig(**record["config"]))
        kept = torch.tensor(record["advantages"])
        assert kept.shape == (group_size, len(record["delta_s"][0]) - 1)
        assert torch.allclose(kept, credit.advantages[:, :-1], atol=1e-6)
        assert torch.allclose(torch.tensor(record["step_weights"]), credit.step_weights, atol=1e-6)


def assert_ranks_get_the_gathered_credit(run, step: int = 1) -> dict:
    """Two ranks of one prompt group each: each rank's advantages at ``step`` are its rows of the
    credit engine's over both ranks' rewards and progress (what one process would compute). Returns
    the records by rank."""
    by_rank = {r["rank"]: r for r in run.log if r["step"] == step}
    assert sorted(by_rank) == [0, 1]
    gathered = {key: torch.cat([torch.tensor(by_rank[rank][key]) for rank in (0, 1)])
                for key in ("rewards", "delta_s", "group_ids")}
    assert gathered["group_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # one prompt per rank
    credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], gathered["group_ids"],
                                  CreditConfig(**by_rank[0]["config"]))
    for rank in (0, 1):
        rows = slice(4 * rank, 4 * rank + 4)
        assert torch.allclose(torch.tensor(by_rank[rank]["advantages"]), credit.advantages[rows, :-1], atol=1e-6)
    return by_rank


def assert_flags_in_the_environment_reach_the_layer(runs, vanilla, *steps: str, trained=lambda run: run.losses):
    """The control of the contract's vanilla parity (test_contract.py): the environment of a launched
    process with --otca among its flags rewrites the upstream file (``trained``: what the run trained)."""
    asked = runs("asked", *steps, env=with_startup_hook("--otca --otca_mode tcd --otca_rewards upstream"))
    assert [r["mode"] for r in asked.log] == ["tcd", "tcd"]
    assert trained(asked) != trained(vanilla)


def float32_advantage_tolerance(record) -> float:
    """How far upstream's float32 group advantage ``(r - mean) / (std + eps)`` can be from the exact
    one: float32 rounding of r and mean (relative 2^-24 each) divided by the group's std. With rewards
    of -0.17 that differ by 0.005 (tiny untrained models) that is 1e-6, not float32's 1e-7."""
    rewards = torch.tensor(record["rewards"], dtype=torch.float64)[:, 0]
    groups = torch.tensor(record["group_ids"])
    worst = max(rewards[groups == g].abs().max() / rewards[groups == g].std() for g in groups.unique())
    return 8 * 2.0 ** -24 * float(max(worst, 1.0))


def assert_same_update(ours, theirs, args, trained_steps, our_advantages, their_advantages, advantage_atol,
                       rows=None, **clips):
    """Two runs trained the same first step: the same rollout and first-step new log-probs
    (bit-identical: same weights, noise and step order), the same advantages within
    ``advantage_atol``, per-term PPO losses equal in float64 within what that allows (terms are
    linear in the advantage), and the same clipped gradient norms. Not the summed loss: its terms
    cancel (a group's advantages have zero mean), so float32 rounding dominates the sum."""
    first = trained_steps.numel()  # the first step's calls: one per (sample, trained column)
    assert torch.equal(torch.stack(ours.terms[0]["new_log_probs"][:first]),
                       torch.stack(theirs.terms[0]["new_log_probs"][:first]))
    assert torch.equal(ours.terms[0]["rollout_log_probs"][0], theirs.terms[0]["rollout_log_probs"][0])
    assert torch.allclose(our_advantages, their_advantages, rtol=0, atol=advantage_atol)
    our_terms = ppo_terms(ours, args, trained_steps, our_advantages, rows=rows, **clips)
    their_terms = ppo_terms(theirs, args, trained_steps, their_advantages, rows=rows, **clips)
    per_unit = ppo_terms(theirs, args, trained_steps, torch.ones_like(their_advantages), rows=rows, **clips)
    assert their_terms.abs().max() > 100 * advantage_atol * per_unit.abs().max(), "the terms carry no signal here"
    assert torch.allclose(our_terms, their_terms, rtol=0, atol=advantage_atol * per_unit.abs().max().item())
    for our_norm, their_norm in zip(ours.grad_norms, theirs.grad_norms):
        assert our_norm == pytest.approx(their_norm, rel=1e-6)


# ---- FlowGRPO (scripts/train_sd3.py under accelerate)

def require_flowgrpo_packages() -> None:
    missing = [m for m in ("ml_collections", "absl", "peft", "wandb") if importlib.util.find_spec(m) is None]
    if missing:
        snapshots.missing(f"FlowGRPO's trainer needs {', '.join(missing)}: pip install -e '.[flowgrpo]'")


@pytest.fixture(scope="session")
def flow_grpo() -> Path:
    """FlowGRPO at the pinned commit ac4c86e (flowgrpo-sd3 is verified there)."""
    require_flowgrpo_packages()
    return upstream_checkout("flow_grpo", "OTCA_UPSTREAM_FLOW_GRPO", "scripts/train_sd3.py")


@pytest.fixture(scope="session")
def flow_grpo_9745241() -> Path:
    """FlowGRPO at 9745241 (2025-11-04): the newer trainers' specs are verified there, and SD3's holds too."""
    require_flowgrpo_packages()
    return newer_checkout("flow_grpo", "9745241", "scripts/train_sd3_fast.py")


def accelerate_launch(nproc: int) -> list[str]:
    """FlowGRPO's launcher on this CPU machine: accelerate with gloo, 1 or ``nproc`` processes."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(nproc),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    if nproc > 1:
        command += ["--multi_gpu", "--main_process_port", str(free_port())]
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


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_port", str(free_port())]


def run_flowgrpo_smoke(upstream: Path, out: Path, *flags: str, nproc: int = 1, env: dict | None = None,
                       check: bool = True, target: str = "flowgrpo-sd3", launcher: str = "accelerate") -> FlowSmokeRun:
    """A FlowGRPO smoke run under ``launcher`` (``accelerate`` or ``torchrun``, as upstream launches the trainer)."""
    launch = accelerate_launch(nproc) if launcher == "accelerate" else torchrun(nproc)
    command = [*launch, *SMOKE, str(upstream), str(out), "--target", target, *flags]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900,
                               env={**os.environ, "WANDB_MODE": "disabled", **(env or {})}, cwd=REPO)
    if check and completed.returncode != 0:
        raise AssertionError(f"smoke run failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    return FlowSmokeRun(out, completed)


def cached_runs(make):
    """``get(name, *flags, **options)``: ``make(folder, *flags, **options)`` once per distinct call (the
    name, every flag and every option), then the same finished run, so the tests of a module
    compare runs made once. A name asked for with other arguments gets a run of its own, in its own
    folder (``name-2``, ...)."""
    made, folders = {}, {}

    def get(name, *flags, **options):
        key = (name, flags, repr(sorted(options.items())))
        if key not in made:
            folders[name] = folders.get(name, 0) + 1
            made[key] = make(name if folders[name] == 1 else f"{name}-{folders[name]}", *flags, **options)
        return made[key]

    return get


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> Path:
    """Where the session's tiny pipelines are built once each (FlowGRPO's, by ``$OTCA_TINY_<MODEL>_DIR``)."""
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def target_runs(tmp_path_factory, tiny_models):
    """``target_runs(name)``: ``get(run name, *flags, **options)`` of target ``name`` (``cached_runs``),
    its smoke runs made once per session and shared by the contract suite and the target's own tests
    (contract.py: the checkout it was verified on, its family's launcher)."""
    from . import contract

    specs = {spec.name: spec for spec in contract.contract_specs()}
    made = {}

    def get(name: str):
        if name not in made:
            spec = specs[name]
            run, _ = contract.family(spec, tiny_models)
            checkout, root = contract.checkout(spec), tmp_path_factory.mktemp(name)
            made[name] = cached_runs(lambda run_name, *flags, **options: run(checkout, root / run_name, *flags, **options))
        return made[name]

    return get
