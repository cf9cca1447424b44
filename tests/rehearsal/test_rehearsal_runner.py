"""The launch rehearsal's verdict on a target's three runs (``otca_patch.rehearsal.runner.judge``),
from run folders written here: what each mismatch makes of the line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.rehearsal.launch_script import expanded_launcher_line, launcher_line, set_options, split_launcher
from otca_patch.rehearsal.plan import Plan
from otca_patch.rehearsal.runner import RUNS, Run, failure, judge, run_once
from otca_patch.rehearsal.verbatim import RECORD_NAME

RANKS = 2
PER_RANK = 4  # samples per rank: two groups of two per step


def run_log(folder: Path, steps: int = 3, perturb: float = 0.0) -> None:
    """A --otca run log of ``steps`` steps over two ranks whose advantages and step weights are the
    credit engine's on its rewards and progress (rank 1's first advantage off by ``perturb``)."""
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    lines = []
    for step in range(1, steps + 1):
        rewards = torch.rand(RANKS * PER_RANK, 1, generator=generator)
        delta_s = torch.rand(RANKS * PER_RANK, 3, generator=generator)
        group_ids = torch.arange(RANKS * PER_RANK) // 2
        credit = credit_from_progress(rewards, delta_s, group_ids, CreditConfig())
        for rank in range(RANKS):
            rows = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
            advantages = credit.advantages[rows].clone()
            if rank == 1:
                advantages[0, 0] += perturb
            lines.append(json.dumps({
                "step": step, "rank": rank, "config": {}, "objectives": ["hpsv2"], "mode": "otca",
                "rewards": rewards[rows].tolist(), "delta_s": delta_s[rows].tolist(),
                "group_ids": group_ids[rows].tolist(), "advantages": advantages.tolist(),
                "step_weights": credit.step_weights[rows].tolist()}))
    (folder / "run_log.jsonl").write_text("\n".join(lines) + "\n")


SETUP = ["0\tsudo apt-get update\trecorded, not run\t0.2\n", "0\tpip install -e .\t\t6.5\n"]


def write_run(folder: Path, losses: list[float], checkpoint: bool = True, setup: list[str] = SETUP) -> None:
    """A run folder as the runner leaves it: its output, its checkpoint, the set-up commands its script ran."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.log").write_text("".join(f"final loss {loss!r}\n" for loss in losses))
    (folder / RECORD_NAME).write_text("".join(setup))
    if checkpoint:
        (folder / "checkpoint-2-0").mkdir(exist_ok=True)


def plan_reading(tmp_path: Path, steps: int = 3) -> Plan:
    def metrics(run: Path) -> list[float]:
        return [float(line.split()[-1]) for line in (run / "stdout.log").read_text().splitlines()]

    return Plan(target="toy", cwd=tmp_path, command=lambda run: ["bash", "scripts/launch.sh"], env={}, ranks=RANKS,
                dataloader_workers=4, steps=steps, replacements=[], metrics=metrics, script="scripts/launch.sh",
                runs_script=True,
                checkpoint_saved=lambda run: (run / "checkpoint-2-0").is_dir(),
                steps_taken=lambda run: len(metrics(run)))


def three_runs(tmp_path: Path, losses: dict[str, list[float]], checkpoints=("unwrapped", "wrapped", "otca"),
               perturb: float = 0.0) -> dict[str, Run]:
    runs = {}
    for name in RUNS:
        write_run(tmp_path / name, losses.get(name, [0.25, -0.5, 1e-8]), checkpoint=name in checkpoints)
        runs[name] = Run(name, tmp_path / name, returncode=0, seconds=1.0)
    run_log(tmp_path / "otca" / "otca", perturb=perturb)
    return runs


def test_runs_that_agree_pass_with_every_field(tmp_path):
    line = judge(plan_reading(tmp_path), three_runs(tmp_path, {}))
    assert line == ("PASS toy ranks=2 dataloader_workers=4 steps=3 checkpoint=yes script=scripts/launch.sh setup=2 "
                    "vanilla=identical credit=reference")


def test_a_set_up_command_that_failed_fails_naming_it(tmp_path):
    runs = three_runs(tmp_path, {})
    write_run(tmp_path / "otca", [0.25, -0.5, 1e-8], setup=[SETUP[0], "1\tpip install -e .\t\t2.0\n"])
    line = judge(plan_reading(tmp_path), runs)
    assert line == "FAIL toy the otca run's set-up command `pip install -e .` exited 1"


def test_runs_that_ran_different_set_up_commands_fail(tmp_path):
    runs = three_runs(tmp_path, {})
    write_run(tmp_path / "wrapped", [0.25, -0.5, 1e-8], setup=SETUP[:1])
    line = judge(plan_reading(tmp_path), runs)
    assert line.startswith("FAIL toy the runs ran different numbers of set-up commands: ")
    assert "'wrapped': 1" in line and "'otca': 2" in line


def test_a_script_run_is_bash_alone_and_the_script_first_under_the_launch(tmp_path):
    from otca_patch.rehearsal.runner import launcher, wrapped

    plan = plan_reading(tmp_path)
    plan.otca_flags = ["--otca_rewards", "upstream"]
    command = plan.command(tmp_path / "unwrapped")
    assert wrapped("unwrapped", plan, tmp_path / "unwrapped", command) == ["bash", "scripts/launch.sh"]
    assert wrapped("wrapped", plan, tmp_path / "wrapped", command) == [*launcher(), "launch", "scripts/launch.sh"]
    assert wrapped("otca", plan, tmp_path / "otca", command) == [
        *launcher(), "launch", "scripts/launch.sh", "--otca", "--otca_log_dir", str(tmp_path / "otca" / "otca"),
        "--otca_rewards", "upstream"]


def test_a_wrapped_loss_one_ulp_away_fails_naming_the_value(tmp_path):
    one_ulp = 0.25 + 2 ** -54  # the next double after 0.25
    assert one_ulp != 0.25
    line = judge(plan_reading(tmp_path), three_runs(tmp_path, {"wrapped": [one_ulp, -0.5, 1e-8]}))
    assert line.startswith("FAIL toy vanilla differs")
    assert "value 0" in line


def test_a_missing_checkpoint_fails(tmp_path):
    line = judge(plan_reading(tmp_path), three_runs(tmp_path, {}, checkpoints=("unwrapped", "otca")))
    assert line == "FAIL toy the wrapped run saved no checkpoint"


def test_too_few_steps_fail(tmp_path):
    line = judge(plan_reading(tmp_path, steps=4), three_runs(tmp_path, {}))
    assert line.startswith("FAIL toy the unwrapped run took 3 optimizer steps")
    assert "(at least 4 asked)" in line


def test_logged_credit_off_the_reference_fails(tmp_path):
    line = judge(plan_reading(tmp_path), three_runs(tmp_path, {}, perturb=1e-3))
    assert line.startswith("FAIL toy credit differs from the reference: step 1 rank 1: logged advantages")


def line_of_a_failed_run(tmp_path: Path, name: str, returncode: int, stderr: str) -> str:
    """The verdict when run ``name`` exited ``returncode`` having written ``stderr``."""
    runs = three_runs(tmp_path, {})
    (tmp_path / name / "stderr.log").write_text(stderr)
    runs[name] = Run(name, tmp_path / name, returncode=returncode, seconds=1.0)
    return judge(plan_reading(tmp_path), runs)


def test_a_failed_run_names_the_layers_error_before_any_exception(tmp_path):
    line = line_of_a_failed_run(tmp_path, "otca", 2, "Steps:   0%|          | 0/100000\rotca-patch launch: error: a "
                                "Python process of this launch never checked in\n[rank0]: RuntimeError: later noise\n")
    assert line == ("FAIL toy the otca run exited 2: otca-patch launch: error: a Python process of this launch "
                    "never checked in")


def test_a_rank_exception_is_named_without_its_rank_prefix(tmp_path):
    line = line_of_a_failed_run(tmp_path, "unwrapped", 1, "[rank1]: ValueError: Unsupported caption type\n"
                                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    assert line == "FAIL toy the unwrapped run exited 1: ValueError: Unsupported caption type"


@pytest.mark.parametrize("bad", [{"ranks": 0}, {"dataloader_workers": 0}, {"otca_flags": ["--otca"]}])
def test_a_plan_that_cannot_rehearse_is_refused(tmp_path, bad):
    fields = dict(target="toy", cwd=tmp_path, command=lambda run: [], env={}, ranks=2, dataloader_workers=1,
                  steps=3, replacements=[], metrics=lambda run: [], checkpoint_saved=lambda run: True)
    with pytest.raises(ValueError, match="Plan toy"):
        Plan(**{**fields, **bad})


def test_the_launch_line_is_read_from_the_script_and_only_the_named_options_change(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("export WANDB_MODE=online\n\ntorchrun --nnodes=2 --nproc_per_node=8 \\\n"
                      "    fastvideo/train.py \\\n    --seed 42 \\\n    --use_group \\\n    --h 720 \\\n"
                      "    --clip_range 1e-4 \\")
    launcher, file, arguments = split_launcher(launcher_line(script))
    assert launcher == ["torchrun", "--nnodes=2", "--nproc_per_node=8"]
    assert file == "fastvideo/train.py"
    assert set_options(arguments, {"--h": "32", "--use_group": None, "--new": "1"}) == [
        "--seed", "42", "--h", "32", "--clip_range", "1e-4", "--new", "1"]


ENDLESS = ("import pathlib, time\nfor step in range(10**6):\n    pathlib.Path('step.txt').write_text(str(step))\n"
           "    time.sleep(0.2)\n")


def endless_plan(tmp_path: Path, **fields) -> Plan:
    """A main that never ends by itself: it writes its step count to ./step.txt every 0.2 s."""
    return Plan(target="endless", cwd=tmp_path, command=lambda run: [sys.executable, "-c", ENDLESS], env={},
                ranks=1, dataloader_workers=1, steps=1, replacements=[], metrics=lambda run: [],
                checkpoint_saved=lambda run: True, run_cwd=lambda run: run, **fields)


def test_a_main_that_never_ends_is_stopped_once_finished_and_that_is_its_end(tmp_path):
    def finished(run: Path) -> bool:
        return (run / "step.txt").is_file() and int((run / "step.txt").read_text() or 0) >= 3

    plan = endless_plan(tmp_path, finished=finished, timeout_s=600)
    run = run_once(plan, "unwrapped", tmp_path / "unwrapped")
    assert run.stopped_when_finished and not run.timed_out
    assert failure(plan, run) is None
    assert int((tmp_path / "unwrapped" / "step.txt").read_text()) >= 3


def test_a_run_past_its_limit_is_stopped_and_fails(tmp_path):
    plan = endless_plan(tmp_path, timeout_s=3)
    run = run_once(plan, "unwrapped", tmp_path / "unwrapped")
    assert run.timed_out
    assert failure(plan, run) == "FAIL endless the unwrapped run was stopped at its 3 s limit"


def test_a_remote_launch_line_gets_the_scripts_plain_variables_only(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text('function pick() {\n    free_port=$port\n}\nfree_port=$(pick)\nsteps=25  # more\n'
                      'key=""\npdsh -w ^hosts "cd $here ;\n        torchrun --node_rank \\$INDEX --master_port '
                      '$free_port \\\n            train.py \\\n            --steps $steps \\\n'
                      '            --key $key \\\n            --last "\n')
    launcher, file, arguments = split_launcher(expanded_launcher_line(script))
    assert launcher == ["torchrun", "--node_rank", "$INDEX", "--master_port", "$free_port"]
    assert (file, arguments) == ("train.py", ["--steps", "25", "--key", "", "--last"])


def test_a_target_whose_upstream_is_missing_fails_naming_where_it_looked(tmp_path, monkeypatch, capsys):
    from otca_patch.rehearsal.__main__ import main

    monkeypatch.setenv("OTCA_UPSTREAM_DANCEGRPO", str(tmp_path / "nowhere"))
    assert main(["--out", str(tmp_path / "out"), "dancegrpo-flux"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert f"FAIL dancegrpo-flux the rehearsal could not be prepared: UpstreamMissing: $OTCA_UPSTREAM_DANCEGRPO=" \
           f"{tmp_path / 'nowhere'} is not a DanceGRPO checkout (it has no fastvideo/train_grpo_flux.py)" in lines
    assert lines[-1].startswith("launch rehearsal: failed (1 of 1 targets) in ")


def test_an_unknown_target_is_refused_naming_the_known_ones(capsys):
    from otca_patch.rehearsal.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(["dancegrpo-nope"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "not a rehearsal target: dancegrpo-nope (they are: " in error
    assert "dancegrpo-flux" in error and "mixgrpo-flux" in error


def test_a_target_this_machine_cannot_host_is_not_run_and_is_no_failure(tmp_path, monkeypatch, capsys):
    import types

    from otca_patch.rehearsal import __main__ as rehearsal
    from otca_patch.rehearsal.plan import NotRunnable

    def plan(target, work, device):
        raise NotRunnable("it runs on no fewer than 2 processes, one GPU each, and this machine has 1 GPU(s)")

    family = types.SimpleNamespace(TARGETS=("fake-two-gpus",), plan=plan)
    monkeypatch.setattr(rehearsal, "families", lambda: {"fake-two-gpus": family})
    assert rehearsal.main(["--out", str(tmp_path / "out"), "fake-two-gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "NOT RUN fake-two-gpus it runs on no fewer than 2 processes, one GPU each, and this machine has 1 GPU(s)" in lines
    assert lines[-1].startswith("launch rehearsal: passed (1 targets) in ")
