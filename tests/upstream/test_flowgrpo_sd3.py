"""FlowGRPO's real ``scripts/train_sd3.py`` ``main()`` on the CPU under ``accelerate launch`` (gloo),
1 and 2 processes, rewritten by the layer (``pytest -m upstream``). Each run trains 2 epochs of a
tiny SD3 (4 samples per process, 4 sampling steps, 3 trained) on upstream's jpeg_compressibility
reward with weight 2 (``avg = 2 * jpeg_compressibility``), per-prompt groups of 4."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress

from .conftest import REPO, accelerate_launch, assert_flags_in_the_environment_reach_the_layer, run_flowgrpo_smoke

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-sd3")]  # with its contract tests

#: FlowGRPO's own normalisation: numpy's population std plus 1e-4
UPSTREAM_NORMALISATION = ["--otca_std_correction", "0", "--otca_adv_eps", "1e-4"]
REWARD_WEIGHT = "2.0"  # the smoke config's weight of jpeg_compressibility in upstream's avg


@pytest.fixture(scope="module")
def tiny_sd3(tmp_path_factory):
    return {"OTCA_TINY_SD3_DIR": str(tmp_path_factory.mktemp("flowgrpo_model") / "tiny_sd3")}


@pytest.fixture(scope="module")
def runs(target_runs):
    """The runs several tests compare, made once (shared with the contract suite)."""
    return target_runs("flowgrpo-sd3")


def tensor(record, key, dtype=None):
    return torch.tensor(record[key], dtype=dtype)


def test_flags_in_the_environment_reach_the_layer(runs):
    vanilla = runs("vanilla")
    assert len(vanilla.result["losses"]) == 2 * 3  # 2 epochs x 3 trained steps, one batch each
    assert_flags_in_the_environment_reach_the_layer(runs, vanilla, trained=lambda run: run.trained)


def test_sum_mode_over_upstreams_reward_weights_reproduces_upstreams_advantages(runs):
    vanilla = runs("vanilla")
    summed = runs("sum", "--otca", "--otca_mode", "sum", "--otca_rewards", "jpeg_compressibility",
                  "--otca_objective_weights", REWARD_WEIGHT, *UPSTREAM_NORMALISATION)
    for record in summed.log:
        ours, theirs = tensor(record, "advantages"), tensor(record, "upstream_advantages")
        assert ours.shape == theirs.shape == (4, 3)  # [B, num_train_timesteps]
        assert theirs.abs().max() > 0.1
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # the same advantages train the same model, up to float32 rounding of the advantages
    losses, grad_norms, _ = summed.trained
    assert losses == pytest.approx(vanilla.result["losses"], rel=1e-4, abs=1e-6)
    assert grad_norms == pytest.approx(vanilla.result["grad_norms"], rel=1e-4)


def test_otca_advantages_are_the_credit_engine_on_the_logged_inputs_step_by_step(runs):
    otca = runs("otca", "--otca")
    assert [r["step"] for r in otca.log] == [1, 2]
    for record in otca.log:
        credit = credit_from_progress(tensor(record, "rewards"), tensor(record, "delta_s"),
                                      tensor(record, "group_ids"), CreditConfig(**record["config"]))
        trained = tensor(record, "advantages")
        assert trained.shape == (4, 3)  # the loop reads step j = 0, 1, 2 of the 4 sampling steps
        assert torch.allclose(trained, credit.advantages[:, :3], atol=1e-6)
        assert not torch.allclose(trained[:, 0], trained[:, 1])  # per step, not repeated
        assert record["group_ids"] == [0, 0, 0, 0]  # one prompt, 4 images, on one process


def test_the_zero_advantage_filter_sees_the_new_advantages(runs):
    otca = runs("otca", "--otca")
    for record in otca.log:
        nonzero = (tensor(record, "advantages").abs().sum(dim=1) != 0).tolist()
        assert record["kept"] == nonzero
    # upstream's avg is 0 * jpeg_compressibility: upstream's advantages are all zero (vanilla would
    # drop every sample), OTCA's from the unweighted objectives are not, and those samples train
    unweighted = runs("zero_avg", "--otca", "--reward_weight", "0")
    for record in unweighted.log:
        assert not tensor(record, "upstream_advantages").any()
        nonzero = (tensor(record, "advantages").abs().sum(dim=1) != 0).tolist()
        assert record["kept"] == nonzero and any(nonzero)
    assert all(loss != 0 for loss in unweighted.result["losses"])


def _gathered(run, step, keys=("rewards", "delta_s", "group_ids")):
    by_rank = [run.record(step, rank) for rank in (0, 1)]
    return by_rank, {key: torch.cat([tensor(r, key) for r in by_rank]) for key in keys}


def test_two_processes_get_the_credit_one_process_computes_over_the_gathered_batch(runs):
    run = runs("otca_2proc", "--otca", nproc=2)
    assert run.record(1, 1)["rank_check"]["world_size"] == 2 and "rank_check" not in run.record(2, 1)
    for step in (1, 2):
        by_rank, gathered = _gathered(run, step)
        assert [r["world_size"] for r in by_rank] == [2, 2]
        ids = gathered["group_ids"]
        # 2 prompts x 4 images, shuffled over the processes by upstream's sampler: groups span them
        assert sorted(ids.tolist()) == [0, 0, 0, 0, 1, 1, 1, 1]
        assert set(ids[:4].tolist()) & set(ids[4:].tolist())
        credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], ids, CreditConfig(**by_rank[0]["config"]))
        for rank, record in enumerate(by_rank):  # split back rank-major, as upstream splits
            rows = slice(4 * rank, 4 * rank + 4)
            assert torch.allclose(tensor(record, "advantages"), credit.advantages[rows, :3], atol=1e-6)
            assert record["summary"] == pytest.approx(by_rank[0]["summary"])
            assert record["kept"] == (tensor(record, "advantages").abs().sum(dim=1) != 0).tolist()


def test_two_process_observe_mode_trains_like_vanilla_on_every_process(runs):
    vanilla = runs("vanilla_2proc", nproc=2)
    observed = runs("observe_2proc", "--otca_observe", nproc=2)
    for rank in (0, 1):
        ours, theirs = (json.loads((run.out / f"smoke_rank{rank}.json").read_text()) for run in (observed, vanilla))
        assert ours["world_size"] == 2
        assert (ours["losses"], ours["grad_norms"], ours["weights_digest"]) == \
               (theirs["losses"], theirs["grad_norms"], theirs["weights_digest"])
    assert sorted((r["step"], r["rank"]) for r in observed.log) == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_two_process_sum_mode_reproduces_upstreams_per_prompt_tracker(runs):
    run = runs("sum_2proc", "--otca", "--otca_mode", "sum", "--otca_rewards", "upstream", *UPSTREAM_NORMALISATION,
               nproc=2)
    for step in (1, 2):
        for rank in (0, 1):
            record = run.record(step, rank)
            assert torch.allclose(tensor(record, "advantages"), tensor(record, "upstream_advantages"),
                                  rtol=1e-5, atol=1e-5)


def _mutated_copy(flow_grpo: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "flow_grpo"
    for part in ("scripts", "config", "flow_grpo"):
        shutil.copytree(flow_grpo / part, copy / part)
    trainer = copy / "scripts" / "train_sd3.py"
    source = trainer.read_text()
    anchor = "samples = {k: v[mask] for k, v in samples.items()}"
    assert source.count(anchor) == 1
    trainer.write_text(source.replace(anchor, "samples = {k: v[mask.bool()] for k, v in samples.items()}"))
    return copy


def test_a_mutated_upstream_file_stops_otca_on_two_processes_and_doctor_reports_it(flow_grpo, tiny_sd3, tmp_path):
    """The contract's mutated copy (test_contract.py) on one process; here on two, each refusing."""
    copy = _mutated_copy(flow_grpo, tmp_path)
    run = run_flowgrpo_smoke(copy, tmp_path / "out", "--otca", nproc=2, env=tiny_sd3, check=False)
    assert run.completed.returncode != 0 and run.result is None and not run.log
    for part in ("scripts/train_sd3.py", "function main", "samples = {k: v[mask] for k, v in samples.items()}",
                 "not found, expected exactly 1", "ac4c86e8cae021841f1fde853d340e0db67690dd"):
        assert part in run.completed.stderr
    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(copy)], capture_output=True,
                            text=True, timeout=120)
    assert doctor.returncode == 1
    assert "record_kept_samples" in doctor.stdout and "FAIL: anchor not found, expected exactly 1" in doctor.stdout
    assert "differs from the file the spec was verified on" in doctor.stdout



# ---- the real launch: scripts/otca_run.sh -- accelerate launch ... scripts/train_sd3.py --config ...

def _launch_through_otca_run(checkout: Path, out: Path, tiny_sd3: dict, *flags: str):
    """FlowGRPO's own command line, unchanged after --, run from the checkout as its README does."""
    from otca_patch.smoke.flowgrpo import trainer_named
    from otca_patch.tiny_models.datasets import built_once

    sd3 = trainer_named("flowgrpo-sd3")
    out.mkdir(parents=True, exist_ok=True)
    model = built_once(Path(tiny_sd3["OTCA_TINY_SD3_DIR"]), sd3.model.build)
    config_flag = sd3.write_config(out, checkout.resolve(), sd3.sizes(), model)
    command = [str(REPO / "scripts" / "otca_run.sh"), *flags, "--", *accelerate_launch(1),
               "scripts/train_sd3.py", "--config", config_flag]
    # upstream is installed with `pip install -e .` in a real environment; here it is on PYTHONPATH
    env = {**os.environ, "WANDB_MODE": "disabled", "OTCA_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(checkout), str(REPO)])}
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=checkout)


def test_otca_run_wraps_flowgrpos_accelerate_command_line(flow_grpo, tiny_sd3, tmp_path):
    log_dir = tmp_path / "logs"
    done = _launch_through_otca_run(flow_grpo, tmp_path / "otca", tiny_sd3, "--otca", "--otca_rewards",
                                    "upstream,jpeg_compressibility", "--otca_log_dir", str(log_dir))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "hook points hold in: scripts/train_sd3.py" in done.stderr
    assert "otca-patch: running scripts/train_sd3.py rewritten by" in done.stderr
    from otca_patch.files import read_jsonl

    numbered, warnings = read_jsonl(log_dir / "run_log.jsonl")
    assert not warnings
    records = [record for _, record in numbered]
    assert [(r["step"], r["rank"], r["objectives"]) for r in records] == [
        (1, 0, ["upstream", "jpeg_compressibility"]), (2, 0, ["upstream", "jpeg_compressibility"])]

    plain = _launch_through_otca_run(flow_grpo, tmp_path / "plain", tiny_sd3)
    assert plain.returncode == 0, plain.stderr[-4000:]
    assert "running the upstream script untouched" in plain.stderr and "otca-patch: running" not in plain.stderr


def test_otca_run_stops_before_launching_on_a_mutated_checkout(flow_grpo, tiny_sd3, tmp_path):
    copy = _mutated_copy(flow_grpo, tmp_path)
    done = _launch_through_otca_run(copy, tmp_path / "out", tiny_sd3, "--otca")
    assert done.returncode == 2
    assert "otca-patch launch: error" in done.stderr and "record_kept_samples" in done.stderr
    assert "Running training" not in done.stderr  # no process was started
