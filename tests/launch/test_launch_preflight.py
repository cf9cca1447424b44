"""``otca-patch launch --otca`` refuses, before upstream's script runs, what cannot train with the
layer: no targeted trainer reachable from the working directory, a registry reward without its
checkpoint, ``--otca_*`` flags without ``--otca``, weights that give non-finite or zero advantages or
do not match the objectives, a target-only flag the trainer does not take, a log folder that cannot
be written, a folder given as the script; it names the set-up commands a script runs first; a failed
launch ends with the first error a process reported. It recognises a target however its path is
written, and says of a file that is not one what doctor says (one verdict). On the synthetic upstream
of test_launch.py and on the pinned upstream snapshots: every launch script starts with ``touch
started``, so "refused before the script runs" is a file that does not exist."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_launch import REPO, RUNTIME, TRAINER, launch, synthetic, synthetic_upstream  # noqa: F401  (synthetic: a fixture)
from upstream_snapshots import newer_checkout, upstream_checkout

RUN_TRAINER = "touch started\npython trainer/train.py --out result.json"


def wrapper(cwd, env, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otca_patch.launch.wrapper", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("otca-patch launch: error: ")]


def assert_refused_before_it_ran(done, folder) -> str:
    """Status 2, one error line, and the script never started; returns the line."""
    assert done.returncode == 2, done.stderr
    assert not (folder / "started").exists(), "the pre-flight must stop the launch before the script runs"
    lines = error_lines(done.stderr)
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def write_script(upstream, text: str, name: str = "launch.sh"):
    script = upstream / name
    script.write_text(f"set -e\n{text}\n")
    return script


# ---- no targeted trainer the command could reach

def test_from_a_subfolder_of_the_checkout_the_launch_is_refused_naming_the_checkout(synthetic):
    upstream, env = synthetic
    (upstream / "scripts").mkdir()
    write_script(upstream / "scripts", RUN_TRAINER)
    line = assert_refused_before_it_ran(wrapper(upstream / "scripts", env, "launch.sh", "--otca"), upstream / "scripts")
    assert "launch.sh runs trainer/train.py, which is not under the current directory" in line
    assert f"run from the upstream checkout: `cd {upstream} && otca-patch launch scripts/launch.sh --otca`" in line
    assert f"Targets found nearby: {upstream} (trainer/train.py)" in line


def test_an_absolute_script_path_from_another_folder_is_refused_naming_the_scripts_checkout(synthetic, tmp_path):
    upstream, env = synthetic
    script = write_script(upstream, RUN_TRAINER)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = assert_refused_before_it_ran(wrapper(elsewhere, env, str(script), "--otca"), elsewhere)
    assert f"not under the current directory {elsewhere}" in line
    assert f"`cd {upstream} && otca-patch launch launch.sh --otca`" in line


def test_a_script_that_runs_no_targeted_trainer_is_refused_listing_the_targets(synthetic):
    upstream, env = synthetic
    (upstream / "distill.py").write_text("print('distilling')\n")
    done = launch(upstream, env, "touch started\ntorchrun --nproc_per_node 4 distill.py --lr 1", "--otca")
    line = assert_refused_before_it_ran(done, upstream)
    assert "runs no trainer the layer targets (it runs distill.py), so --otca would change nothing" in line
    assert "targeted trainers here: trainer/train.py" in line and "without --otca" in line


def test_a_launch_that_names_a_copy_is_refused_by_the_preflight_with_the_copy_message(synthetic):
    upstream, env = synthetic
    (upstream / "trainer" / "mine.py").write_text("# my variant\n" + TRAINER)
    line = assert_refused_before_it_ran(launch(upstream, env, "touch started\npython trainer/mine.py", "--otca"),
                                        upstream)
    assert "trainer/mine.py is not a file the layer targets: a copy of trainer/train.py, 100% of its lines, and " \
           "synthetic-trainer's spec holds on it" in line
    assert "--otca_target synthetic-trainer=trainer/mine.py" in line


def test_a_nested_script_and_a_module_launch_reach_the_trainer(synthetic):
    """What the launch runs is read through the shell scripts it calls, and ``-m`` names the file."""
    upstream, env = synthetic
    write_script(upstream, RUN_TRAINER, "inner.sh")
    done = launch(upstream, env, "bash inner.sh", "--otca")
    assert done.returncode == 0, done.stderr
    assert "hook points hold in: trainer/train.py [synthetic-trainer]" in done.stderr
    done = wrapper(upstream, env, "--otca", "--", sys.executable, "-m", "trainer.train", "--out", "result.json")
    assert "hook points hold in: trainer/train.py [synthetic-trainer]" in done.stderr, done.stderr


# ---- reward checkpoints

def test_a_registry_reward_without_its_checkpoint_is_refused_naming_the_flag(synthetic):
    upstream, env = synthetic
    env = {k: v for k, v in env.items() if not k.startswith("OTCA_CKPT_")}
    done = launch(upstream, env, RUN_TRAINER, "--otca", "--otca_rewards", "upstream,clip_t")
    line = assert_refused_before_it_ran(done, upstream)
    assert "reward model 'clip_t': no checkpoint path" in line
    assert "pass --otca_reward_ckpt clip_t=PATH or set OTCA_CKPT_CLIP_T" in line
    done = launch(upstream, env, RUN_TRAINER, "--otca", "--otca_rewards", "upstream,clip_t",
                  "--otca_reward_ckpt", "clip_t=/ckpt/nowhere.safetensors")
    line = assert_refused_before_it_ran(done, upstream)
    assert "checkpoint not found; path tried: /ckpt/nowhere.safetensors" in line


def test_a_checkpoint_from_the_variable_passes_the_preflight(synthetic, tmp_path):
    upstream, env = synthetic
    checkpoint = tmp_path / "clip.safetensors"
    checkpoint.write_bytes(b"weights")
    done = launch(upstream, dict(env, OTCA_CKPT_CLIP_T=str(checkpoint)), RUN_TRAINER, "--otca", "--otca_rewards",
                  "upstream,clip_t")
    assert "no checkpoint path" not in done.stderr and (upstream / "started").exists(), done.stderr


# ---- flags without the switch, misspelled switches, bad values

@pytest.mark.parametrize("flags, expected", [
    (["--otca_rewards", "upstream,clip_t"], "--otca_rewards upstream,clip_t: otca-patch flags without --otca or "
                                            "--otca_observe would run the upstream script untouched"),
    (["-otca"], "-otca is not an otca-patch flag (they start with two ASCII dashes); did you mean --otca?"),
    (["\u2014otca", "--otca_mode", "tcd"], "\u2014otca is not an otca-patch flag"),
    (["--otca", "--otca_objective_weights", "1e39"], "--otca_objective_weights: must be finite, >= 0 and at most 1e+20"),
    (["--otca", "--otca_objective_weights", "1e308"], "index 0 is 1e+308"),
    (["--otca", "--otca_objective_weights", "0"], "--otca_objective_weights: all 1 are 0, so every advantage would be 0"),
    (["--otca", "--otca_log_dir="], "--otca_log_dir: empty"),
])
def test_flags_that_cannot_train_with_the_layer_are_refused_in_one_line(synthetic, flags, expected):
    upstream, env = synthetic
    line = assert_refused_before_it_ran(launch(upstream, env, RUN_TRAINER, *flags), upstream)
    assert expected in line


def test_without_any_otca_flag_the_script_still_runs_untouched(synthetic):
    upstream, env = synthetic
    done = launch(upstream, env, RUN_TRAINER)
    assert done.returncode == 0 and (upstream / "result.json").exists(), done.stderr


# ---- what the script does first

def test_the_preflight_line_names_the_set_up_commands_before_they_run(synthetic):
    upstream, env = synthetic
    stubs = "pip() { :; }\ngit() { :; }\n"  # stand-ins: the test must not install or clone anything
    done = launch(upstream, env, stubs + "git clone https://example.invalid/HPSv2.git\npip install -e .\n" + RUN_TRAINER,
                  "--otca")
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("otca-patch launch: layer installed (--otca); hook points hold in: trainer/train.py")
    assert ("before training, the script runs set-up commands that change this machine or environment, now: "
            "`git clone https://example.invalid/HPSv2.git`, `pip install -e .`") in first


# ---- the end of a failed launch

FAILING_RUNTIME = textwrap.dedent('''\
    class Runtime:
        def __init__(self, config, spec):
            raise ValueError("reward model 'clip_t': cannot read checkpoint /ckpt/clip.pt")
''')


def test_a_failed_launch_ends_with_the_first_error_a_worker_reported(tmp_path):
    upstream, env = synthetic_upstream(tmp_path, TRAINER, FAILING_RUNTIME)
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca")
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    error, last = done.stderr.strip().splitlines()[-2:]  # the error, then the launch's closing line
    assert error.startswith("otca-patch launch: error: the launch failed; the first error a process reported "
                            "(trainer/train.py, host "), done.stderr
    assert error.endswith("reward model 'clip_t': cannot read checkpoint /ckpt/clip.pt")
    assert last.startswith("otca-patch launch: failed (exit status 2, the error above)")
    assert "otca-patch doctor" not in done.stderr  # not the generic advice


def test_an_error_a_process_reported_fails_the_launch_even_when_the_script_exits_0(tmp_path):
    """A process the wrapper cannot collect (a tmux window) or whose failure the script ignores: the
    error it reported still fails the launch, after the targeted trainer trained patched."""
    upstream, env = synthetic_upstream(tmp_path, TRAINER, RUNTIME)
    (upstream / "trainer" / "train_copy.py").write_text((upstream / "trainer" / "train.py").read_text())
    done = launch(upstream, env, "python trainer/train.py --out result.json\n"
                                 "python trainer/train_copy.py --out copy.json || true", "--otca")
    assert json.loads((upstream / "result.json").read_text())["advantages"] == [-4.0, -2.0, 6.0]
    assert not (upstream / "copy.json").exists()
    assert done.returncode == 2, done.stderr
    error, last = done.stderr.strip().splitlines()[-2:]
    assert error.startswith("otca-patch launch: error: the launch failed; the first error a process reported "
                            "(trainer/train_copy.py, "), done.stderr
    assert "is not a file the layer targets" in error
    assert last.startswith("otca-patch launch: failed (exit status 2, the error above)")


def test_a_trainer_that_raises_under_the_layer_is_relayed_with_its_exception(tmp_path):
    trainer = TRAINER.replace("    advantages = [", "    raise ValueError('credit: 3 of 8 advantages are not finite')\n"
                                                 "    advantages = [")
    assert trainer != TRAINER
    upstream, env = synthetic_upstream(tmp_path, trainer, RUNTIME)
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-2].endswith(
        "ValueError: credit: 3 of 8 advantages are not finite"), done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("otca-patch launch: failed")


@pytest.mark.parametrize("program, expected", [
    ("accelerate-not-installed", "accelerate-not-installed: command not found on PATH; activate the training "
                                  "environment that provides it (or give its full path)"),
    ("./no-such-launcher", "./no-such-launcher: no such file"),
])
@pytest.mark.parametrize("flags", [["--otca"], []])
def test_a_command_that_cannot_start_is_refused_in_one_line(synthetic, program, expected, flags):
    """A launcher missing from the launch's environment (the trainer's env not activated) is said in one
    line before anything runs, with or without the layer, not as a traceback of the wrapper."""
    upstream, env = synthetic
    done = wrapper(upstream, env, *flags, "--", program, "launch", "trainer/train.py")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert error_lines(done.stderr) == [f"otca-patch launch: error: {expected}"], done.stderr


# ---- wandb: whether the layer's panels will appear, said once before training

def note_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "otca/ panels" in line]


def without_wandb_settings(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in ("WANDB_DISABLED", "WANDB_MODE")}


def test_a_script_that_disables_wandb_gets_one_note_saying_the_panels_will_not_appear(synthetic):
    upstream, env = synthetic
    # DanceGRPO's finetune scripts begin so; WANDB_MODE=online after it does not undo it
    done = launch(upstream, without_wandb_settings(env),
                  'export WANDB_DISABLED=true\nexport WANDB_MODE=online\n' + RUN_TRAINER, "--otca")
    assert done.returncode == 0, done.stderr
    [note] = note_lines(done.stderr)
    assert note.startswith("otca-patch launch: note: launch.sh sets WANDB_DISABLED=true, so wandb uploads nothing")
    assert "run a copy of the script without that line" in note and "otca-patch compare otca_logs" in note


def test_the_environment_disabling_wandb_is_named_and_a_script_that_leaves_it_on_gets_no_note(synthetic):
    upstream, env = synthetic
    done = launch(upstream, dict(without_wandb_settings(env), WANDB_MODE="disabled"), RUN_TRAINER, "--otca")
    [note] = note_lines(done.stderr)
    assert "the environment has WANDB_MODE=disabled" in note and "set WANDB_MODE=online" in note
    done = launch(upstream, without_wandb_settings(env), "# export WANDB_DISABLED=true\n" + RUN_TRAINER, "--otca")
    assert done.returncode == 0 and note_lines(done.stderr) == [], done.stderr


def test_a_launch_ends_with_one_line_saying_how_it_ended_and_where_the_run_log_is(synthetic):
    upstream, env = synthetic
    done = launch(upstream, env, RUN_TRAINER, "--otca", "--otca_log_dir", "logs")
    assert done.returncode == 0, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("otca-patch launch: finished; ") and " logs/run_log.jsonl" in last
    done = launch(upstream, env, RUN_TRAINER + "\nexit 3", "--otca")
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1].startswith("otca-patch launch: failed (exit status 3")
# ---- a target however its path is written, on the pinned DanceGRPO trainer

FLUX = "fastvideo/train_grpo_flux.py"


def real_env() -> dict:
    """The environment of a launch on a real upstream checkout: the shipped specs, this otca_patch."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for variable in ("OTCA_PATCHES_DIR", "OTCA_PATCH_ARGS"):
        env.pop(variable, None)
    return env


@pytest.fixture()
def dancegrpo_trainers(tmp_path):
    """A DanceGRPO checkout (the pinned snapshot's trainer files: what the launch and doctor read),
    writable: the launch keeps its record beside the script."""
    source = upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", FLUX)
    checkout = tmp_path / "DanceGRPO"
    (checkout / "fastvideo").mkdir(parents=True)
    for trainer in (source / "fastvideo").glob("train*.py"):
        shutil.copy(trainer, checkout / "fastvideo" / trainer.name)
    return checkout


@pytest.mark.parametrize("line", [
    "python ./fastvideo//train_grpo_flux.py",
    "python fastvideo/../fastvideo/train_grpo_flux.py",
    "python {checkout}/fastvideo/train_grpo_flux.py",
    "python flux_link.py",
    "cd fastvideo && python train_grpo_flux.py",
    "bash -c 'cd fastvideo && python train_grpo_flux.py'",
    "cd fastvideo; python ../fastvideo/train_grpo_flux.py",
    "cd fastvideo\npython train_grpo_flux.py",
], ids=["./ and //", "..", "absolute", "symlink", "cd &&", "bash -c cd", "cd ; ..", "cd line"])
def test_each_way_of_writing_the_trainers_path_passes_the_preflight_and_runs_patched(dancegrpo_trainers, line):
    checkout = dancegrpo_trainers
    (checkout / "flux_link.py").symlink_to(checkout / FLUX)
    script = write_script(checkout, "touch started\n" + line.format(checkout=checkout))
    done = wrapper(checkout, real_env(), str(script), "--otca")
    assert (checkout / "started").exists(), done.stderr
    assert f"layer installed (--otca); hook points hold in: {FLUX} [dancegrpo-flux]" in done.stderr, done.stderr
    # the process became the layer's worker (upstream's own imports then fail here: no fastvideo package)
    assert "rewritten by" in done.stderr and "target dancegrpo-flux" in done.stderr, done.stderr
    assert "is not a file the layer targets" not in done.stderr and "runs no trainer" not in done.stderr


# ---- one verdict: doctor, the pre-flight and the start-up hook say the same of the same file

def doctor_line(checkout: Path, file: str) -> str:
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], env=real_env(),
                          capture_output=True, text=True, timeout=300)
    return next(line.strip() for line in done.stdout.splitlines() if line.startswith(f"  {file} ("))


def doctor_clause(checkout: Path, file: str) -> str:
    """What doctor says of ``file`` in the parentheses after its name."""
    line = doctor_line(checkout, file)
    assert line.endswith(")"), line
    return line[len(file) + 2:-1]


@pytest.mark.parametrize("name", ["train_sd3_dpo.py", "train_sd3_sft.py"])
def test_flowgrpos_dpo_and_sft_trainers_are_not_grpo_for_the_launch_and_for_doctor(tmp_path, name):
    source = newer_checkout("flow_grpo", "9745241", "scripts/train_sd3_dpo.py")
    checkout = tmp_path / "flow_grpo"
    shutil.copytree(source / "scripts", checkout / "scripts", ignore=shutil.ignore_patterns("*.sh", "*.yaml"))
    said = doctor_clause(checkout, f"scripts/{name}")
    assert said.startswith("not a GRPO trainer: launch it without --otca"), said
    script = write_script(checkout, f"touch started\naccelerate launch scripts/{name} --config config/dpo.py")
    line = assert_refused_before_it_ran(wrapper(checkout, real_env(), str(script), "--otca"), checkout)
    assert line == f"otca-patch launch: error: scripts/{name} is not a file the layer targets: {said}"
    assert "--otca_target" not in line and "a copy of" not in line


def test_rebase_says_in_short_what_doctor_says_of_each_uncovered_trainer():
    from otca_patch.hooks.coverage import uncovered_summary
    from otca_patch.hooks.spec import load_specs

    checkout = newer_checkout("flow_grpo", "9745241", "scripts/train_sd3_dpo.py")
    assert uncovered_summary(checkout, load_specs()) == [
        "trainer files no spec covers (3):",
        "  scripts/train_bagel.py: a GRPO trainer without a spec yet: it needs a spec of its own",
        "  scripts/train_sd3_dpo.py: not a GRPO trainer: launch it without --otca",
        "  scripts/train_sd3_sft.py: not a GRPO trainer: launch it without --otca"]


def branch_trainer(checkout: Path) -> str:
    """A renamed, restructured copy of the FLUX trainer (BranchGRPO-like): most of its lines, its
    hooked step function renamed, so no spec's hook points hold on it."""
    text = (checkout / FLUX).read_text()
    renamed = text.replace("train_one_step", "train_one_branch_step")
    assert renamed != text
    (checkout / "fastvideo" / "train_branchgrpo_flux.py").write_text(renamed)
    return "fastvideo/train_branchgrpo_flux.py"


def test_a_renamed_restructured_trainer_needs_a_spec_of_its_own_for_doctor_the_preflight_and_the_start_up_hook(
        dancegrpo_trainers):
    checkout = dancegrpo_trainers
    file = branch_trainer(checkout)
    said = doctor_clause(checkout, file)
    assert said.startswith("nearest spec: dancegrpo-flux, ") and "it needs a spec of its own, not --otca_target" in said
    script = write_script(checkout, f"touch started\npython {file}")
    line = assert_refused_before_it_ran(wrapper(checkout, real_env(), str(script), "--otca"), checkout)
    assert line.startswith(f"otca-patch launch: error: {file} is not a file the layer targets: {said}"), line
    assert f"--otca_target dancegrpo-flux={file}" not in line
    # built at run time: the pre-flight cannot read it, the start-up hook stops it with the same verdict
    script = write_script(checkout, "touch started\nv=branchgrpo; python fastvideo/train_${v}_flux.py")
    done = wrapper(checkout, real_env(), str(script), "--otca")
    assert done.returncode == 2 and (checkout / "started").exists()
    assert f"{file} is not a file the layer targets: {said}" in done.stderr, done.stderr


def test_a_copy_the_flux_spec_holds_on_gets_the_otca_target_that_doctor_gives(dancegrpo_trainers):
    checkout = dancegrpo_trainers
    file = "fastvideo/train_grpo_flux_mine.py"
    (checkout / file).write_text("# my variant\n" + (checkout / FLUX).read_text())
    said = doctor_clause(checkout, file)
    assert said.endswith(f"dancegrpo-flux's spec holds on it: --otca_target dancegrpo-flux={file}"), said
    script = write_script(checkout, f"touch started\npython {file}")
    line = assert_refused_before_it_ran(wrapper(checkout, real_env(), str(script), "--otca"), checkout)
    assert line.startswith(f"otca-patch launch: error: {file} is not a file the layer targets: {said}"), line


def test_a_reformatted_copy_below_the_copy_share_gets_the_spec_that_holds_on_it(dancegrpo_trainers):
    """Reformatted (``ast.unparse``), the FLUX trainer shares too few lines to be a copy by lines, but
    it is a GRPO trainer the FLUX spec's hook points hold on: doctor and the launch name that spec."""
    import ast

    checkout = dancegrpo_trainers
    file = "fastvideo/train_grpo_flux_fmt.py"
    (checkout / file).write_text(ast.unparse(ast.parse((checkout / FLUX).read_text())))
    said = doctor_clause(checkout, file)
    assert said == f"dancegrpo-flux's spec holds on it: --otca_target dancegrpo-flux={file}"
    script = write_script(checkout, f"touch started\npython {file}")
    line = assert_refused_before_it_ran(wrapper(checkout, real_env(), str(script), "--otca"), checkout)
    assert line.startswith(f"otca-patch launch: error: {file} is not a file the layer targets: {said}"), line


def test_from_another_projects_checkout_a_grpo_trainer_needs_a_spec_of_its_own(tmp_path):
    """A derivative's own checkout (no file the specs target): not "run from the upstream checkout",
    but what doctor says of its trainer."""
    checkout = tmp_path / "Derivative"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts" / "train_mine.py").write_text(
        "import torch\n\ndef step(sample, log_prob, old_log_prob, optimizer):\n"
        "    ratio = torch.exp(log_prob - old_log_prob)\n    loss = (-sample['advantages'] * ratio).mean()\n"
        "    loss.backward()\n    optimizer.step()\n")
    (checkout / "scripts" / "train_nft.py").write_text(
        "def step(model_pred, target, optimizer):\n    loss = ((model_pred - target) ** 2).mean()\n"
        "    loss.backward()\n    optimizer.step()\n")
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], env=real_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "holds none of the files the hook specs target" in done.stderr
    mine = doctor_clause(checkout, "scripts/train_mine.py")
    assert mine == "a GRPO trainer that no spec covers: it needs a spec of its own, not --otca_target"
    nft = doctor_clause(checkout, "scripts/train_nft.py")
    assert nft.startswith("not a GRPO trainer")
    for file, said in (("scripts/train_mine.py", mine), ("scripts/train_nft.py", nft)):
        script = write_script(checkout, f"touch started\ntorchrun --nproc_per_node 2 {file}")
        line = assert_refused_before_it_ran(wrapper(checkout, real_env(), str(script), "--otca"), checkout)
        assert line.startswith(f"otca-patch launch: error: {file} is not a file the layer targets: {said}"), line
        assert "run from the upstream checkout" not in line


# ---- every flag error before the launch script's first command

@pytest.mark.parametrize("flags, expected", [
    (["--otca_objective_weights", "1,2,3"], "--otca_objective_weights: 3 weights for 1 objective columns upstream"),
    (["--otca_rewards", "upstream,clip_t", "--otca_objective_weights", "1,2,3"],
     "--otca_objective_weights: 3 weights for 2 objective columns upstream,clip_t"),
    (["--otca_video_frames", "2"], "--otca_video_frames: not a flag of target dancegrpo-flux"),
    (["--otca_wan22"], "--otca_wan22: not a flag of target dancegrpo-flux"),
    (["--otca_video_frames", "0"], "--otca_video_frames: give at least 1 frame per video, got 0"),
    (["--otca_log_dir", "/proc/nope"], "--otca_log_dir /proc/nope: run_log.jsonl cannot be written there"),
], ids=["weights", "weights with a registry reward", "video frames", "wan22", "zero frames", "log dir"])
def test_a_flag_error_on_a_real_target_is_refused_before_the_script_runs(dancegrpo_trainers, tmp_path, flags, expected):
    checkout = dancegrpo_trainers
    checkpoint = tmp_path / "clip.safetensors"
    checkpoint.write_bytes(b"weights")
    script = write_script(checkout, f"touch started\npython {FLUX}")
    done = wrapper(checkout, dict(real_env(), OTCA_CKPT_CLIP_T=str(checkpoint)), str(script), "--otca", *flags)
    line = assert_refused_before_it_ran(done, checkout)
    assert expected in line
    assert "upstream.vq" not in line, "a FLUX launch's error names FLUX's objectives, not HunyuanVideo's"


def test_weights_for_every_column_of_a_multi_column_trainer_pass(dancegrpo_trainers):
    checkout = dancegrpo_trainers
    script = write_script(checkout, "touch started\npython fastvideo/train_grpo_hunyuan.py")
    done = wrapper(checkout, real_env(), str(script), "--otca", "--otca_objective_weights", "1,2,3",
                   "--otca_video_frames", "2")
    assert (checkout / "started").exists(), done.stderr
    assert "hook points hold in: fastvideo/train_grpo_hunyuan.py [dancegrpo-hunyuan]" in done.stderr


def test_a_log_folder_that_cannot_be_made_is_refused_and_a_new_one_is_left_as_it_was(synthetic, tmp_path):
    upstream, env = synthetic
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    line = assert_refused_before_it_ran(launch(upstream, env, RUN_TRAINER, "--otca", "--otca_log_dir",
                                               str(blocked / "logs")), upstream)
    assert line == (f"otca-patch launch: error: --otca_log_dir {blocked / 'logs'}: run_log.jsonl cannot be written "
                    f"there (File exists: {blocked}); give a folder this user can write")
    done = launch(upstream, env, RUN_TRAINER, "--otca", "--otca_log_dir", "new/logs")
    assert done.returncode == 0, done.stderr
    assert not (upstream / "new").exists(), "the pre-flight removes the folders it made to probe"


def test_a_folder_given_as_the_launch_script_is_said_to_be_one(synthetic):
    upstream, env = synthetic
    (upstream / "scripts" / "finetune").mkdir(parents=True)
    write_script(upstream / "scripts" / "finetune", RUN_TRAINER, "finetune.sh")
    line = assert_refused_before_it_ran(wrapper(upstream, env, "scripts", "--otca"), upstream)
    assert line == ("otca-patch launch: error: scripts is a folder, not a launch script; give one of its launch "
                    "scripts (scripts/finetune/finetune.sh)")
    line = assert_refused_before_it_ran(wrapper(upstream, env, "trainer", "--otca"), upstream)
    assert line.endswith("trainer is a folder, not a launch script; for a Python trainer in it give the command "
                         "after --: `otca-patch launch --otca -- python trainer/train.py ...`")
