"""A copied DanceGRPO FLUX trainer: ``cp fastvideo/train_grpo_flux.py
fastvideo/train_grpo_flux_mine.py`` and a launch script that runs the copy. Under ``otca-patch launch
--otca`` it stops before any of its code runs and names the FLUX spec; with ``--otca_target
dancegrpo-flux=fastvideo/train_grpo_flux_mine.py`` it runs patched: the launch's worker rewrites it,
and its CPU smoke trains exactly as the pinned file's does, with the engine's credit."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress

from free_port import free_port

from .conftest import REPO, run_smoke

pytestmark = pytest.mark.upstream
FLUX = "fastvideo/train_grpo_flux.py"
MINE = "fastvideo/train_grpo_flux_mine.py"
MARK = "running my variant of the FLUX trainer"


@pytest.fixture()
def checkout(dancegrpo, tmp_path):
    """A user's DanceGRPO checkout with the copy: the trainer with one line of the user's on top."""
    copy = tmp_path / "DanceGRPO"
    shutil.copytree(dancegrpo / "fastvideo", copy / "fastvideo")
    (copy / MINE).write_text(f"print({MARK!r}, flush=True)\n" + (copy / FLUX).read_text())
    stub = tmp_path / "stubs" / "flash_attn"  # cannot be built without CUDA; the --help run never calls it
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("def flash_attn_varlen_qkvpacked_func(*a, **k):\n    raise RuntimeError('stub')\n")
    (stub / "bert_padding.py").write_text("def pad_input(*a, **k):\n    raise RuntimeError('stub')\n"
                                          "unpad_input = pad_input\n")
    return copy


def launch(checkout, line, *flags):
    (checkout / "run.sh").write_text(f"set -e\n{line}\n")
    env = dict(os.environ, OTCA_PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(
        [str(REPO), str(checkout), str(checkout.parent / "stubs"), os.environ.get("PYTHONPATH", "")]),
        PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([str(REPO / "scripts" / "otca_run.sh"), "run.sh", *flags], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_copied_trainer_stops_before_any_of_its_code_runs_and_names_the_flux_spec(checkout):
    done = launch(checkout, f"torchrun --nproc_per_node 1 --master_port {free_port()} {MINE} "
                            "--data_json_path data/rl_embeddings/videos2caption.json --seed 42", "--otca")
    assert done.returncode != 0
    assert MARK not in done.stdout, "not one line of the copy may run"
    assert f"{MINE} is not a file the layer targets: a copy of {FLUX}, " in done.stderr
    assert "dancegrpo-flux's spec holds on it" in done.stderr
    assert f"--otca_target dancegrpo-flux={MINE}" in done.stderr
    # the pre-flight reads the copy's name in run.sh and stops the launch before torchrun starts
    assert done.stderr.startswith(f"otca-patch launch: error: {MINE} is not a file the layer targets"), done.stderr


def test_with_otca_target_the_launch_runs_the_copy_rewritten(checkout):
    done = launch(checkout, f"python {MINE} --help", "--otca", "--otca_target", f"dancegrpo-flux={MINE}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"hook points hold in: {MINE} (as dancegrpo-flux)" in done.stderr
    assert f"running {checkout / MINE} rewritten by" in done.stderr and "train_grpo_flux.toml" in done.stderr
    assert MARK in done.stdout and "--data_json_path" in done.stdout  # the copy's own __main__ ran
    assert "is not a file the layer targets" not in done.stderr


def test_the_copys_otca_smoke_trains_as_the_pinned_file_does_and_logs_the_engines_credit(dancegrpo, checkout, tmp_path):
    mine = run_smoke(checkout, tmp_path / "mine", "--otca", "--steps", "1", "--otca_target", f"dancegrpo-flux={MINE}")
    pinned = run_smoke(dancegrpo, tmp_path / "pinned", "--otca", "--steps", "1")
    assert MARK in mine.completed.stdout and MARK not in pinned.completed.stdout
    assert "target" not in mine.log[0], "the spec is recorded once, under spec"
    assert (mine.log[0]["spec"]["target"], mine.log[0]["spec"]["file"]) == ("dancegrpo-flux", str(checkout / MINE))
    assert (pinned.log[0]["spec"]["target"], pinned.log[0]["spec"]["file"]) == ("dancegrpo-flux", FLUX)
    assert mine.losses == pinned.losses and mine.grad_norms == pinned.grad_norms
    record = mine.log[0]
    credit = credit_from_progress(torch.tensor(record["rewards"]), torch.tensor(record["delta_s"]),
                                  torch.tensor(record["group_ids"]), CreditConfig(**record["config"]))
    assert record["mode"] == "otca" and not torch.allclose(credit.step_weights, torch.ones_like(credit.step_weights))
    assert torch.allclose(torch.tensor(record["advantages"]), credit.advantages[:, :-1], atol=1e-6)
    vanilla = run_smoke(checkout, tmp_path / "vanilla", "--steps", "1", "--otca_target", f"dancegrpo-flux={MINE}")
    assert MARK in vanilla.completed.stdout, "without --otca the named copy runs too, untouched"
    assert vanilla.losses != mine.losses
