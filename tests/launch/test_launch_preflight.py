"""``otca-patch launch --otca`` refuses, before upstream's script runs, what cannot train with the
layer: no targeted trainer reachable from the working directory, a registry reward
without its checkpoint, ``--otca_*`` flags without ``--otca``, weights that give non-finite or zero
advantages; it names the set-up commands a script runs first; and a failed launch ends with the first
error a process reported (item 5). On the synthetic upstream of test_launch.py: every launch script
starts with ``touch started``, so "refused before the script runs" is a file that does not exist."""
import subprocess
import sys
import textwrap

import pytest

from test_launch import RUNTIME, TRAINER, launch, synthetic, synthetic_upstream  # noqa: F401  (synthetic: a fixture)

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
    assert "trainer/mine.py is not a file the layer targets but a copy of trainer/train.py" in line
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
