"""Copies and variants of a targeted trainer: a launch under --otca that runs a copy stops
before training and names the spec; ``--otca_target NAME=PATH`` runs the copy patched (launch,
``otca-patch run``, doctor); a launch in which no targeted process started fails and names the
scripts that ran. On the synthetic upstream of test_launch.py; the DanceGRPO copy is in
tests/upstream/test_copies_dancegrpo.py."""
import json
import os
import subprocess
import sys

import pytest

from test_launch import REPO, hook_environment, launch, synthetic  # noqa: F401  (synthetic is a fixture)

COPY = "trainer/train_mine.py"


def make_copy(upstream, edit=lambda text: text):
    """``trainer/train_mine.py``: the synthetic trainer copied, with ``edit`` applied (a user's variant)."""
    copy = upstream / COPY
    copy.write_text(edit((upstream / "trainer" / "train.py").read_text()))
    return copy


def result(upstream):
    return json.loads((upstream / "result.json").read_text())


def test_a_copy_of_a_targeted_trainer_stops_before_it_runs_and_names_the_spec(synthetic):
    upstream, env = synthetic
    make_copy(upstream, lambda text: "# my variant\n" + text)
    done = launch(upstream, env, f"python {COPY} --out result.json", "--otca")
    assert done.returncode == 2, done.stderr
    assert not (upstream / "result.json").exists(), "the copy must not train unpatched"
    stop = [line for line in done.stderr.splitlines() if "is not a file the layer targets" in line]
    assert len(stop) == 1, done.stderr
    assert stop[0].startswith("otca-patch launch: error: trainer/train_mine.py")
    assert "a copy of trainer/train.py" in stop[0] and f"--otca_target synthetic-trainer={COPY}" in stop[0]
    assert "Traceback" not in done.stderr


def test_the_copy_named_by_otca_target_runs_patched(synthetic):
    upstream, env = synthetic
    make_copy(upstream, lambda text: "# my variant\n" + text)
    done = launch(upstream, env, f"python {COPY} --out result.json", "--otca", "--otca_target",
                  f"synthetic-trainer={COPY}")
    assert done.returncode == 0, done.stderr
    assert result(upstream)["advantages"] == [-4.0, -2.0, 6.0], "the hook scaled the copy's advantages"
    assert f"hook points hold in: {COPY} (as synthetic-trainer)" in done.stderr
    assert "sha256" in done.stderr and "differs from the file the spec was verified on" in done.stderr


def test_without_the_layer_the_copy_runs_as_published(synthetic):
    upstream, env = synthetic
    make_copy(upstream)
    done = launch(upstream, env, f"python {COPY} --out result.json")
    assert done.returncode == 0, done.stderr
    assert result(upstream)["advantages"] == [-2.0, -1.0, 3.0]


def test_a_script_that_only_shares_function_names_is_not_a_copy(synthetic):
    """Defining the hooked function is not enough: most of the trainer's lines must be there too. The
    launch then runs it (its path is built at run time, so the pre-flight cannot refuse it), but fails
    at the end: no targeted process ever started."""
    upstream, env = synthetic
    (upstream / "tool.py").write_text("import sys\n\ndef advantages_for(values):\n    return sorted(values)\n\n"
                                      "print(advantages_for([3, 1, 2]))\n")
    done = launch(upstream, env, 'name=tool; python "$name.py"\npython -m json.tool --help > /dev/null', "--otca")
    assert "[1, 2, 3]" in done.stdout, done.stderr
    assert done.returncode == 2
    error, last = done.stderr.strip().splitlines()[-2:]  # the error, then the launch's closing line
    assert error.startswith("otca-patch launch: error: the launch ended and no process ran a file the layer targets")
    assert "Python scripts that ran: tool.py, -m json.tool" in error
    assert last.startswith("otca-patch launch: failed (exit status 2")


def test_a_launch_that_runs_the_trainer_and_other_scripts_succeeds(synthetic):
    upstream, env = synthetic
    (upstream / "prepare.py").write_text("print('prepared')\n")
    done = launch(upstream, env, "python prepare.py\npython trainer/train.py --out result.json", "--otca")
    assert done.returncode == 0, done.stderr
    assert "prepared" in done.stdout and result(upstream)["advantages"] == [-4.0, -2.0, 6.0]
    assert "no process ran" not in done.stderr
    assert not list(upstream.glob(".otca-launch-*")), "the launch's record is removed when it ends"


def test_a_failing_launch_keeps_its_exit_status(synthetic):
    upstream, env = synthetic
    line = "name=exit5; printf 'import sys\\nsys.exit(5)\\n' > \"$name.py\"; python \"$name.py\""  # built at run time
    done = launch(upstream, env, line, "--otca")
    assert done.returncode == 5
    assert "the launch's top process ended with status 5 before any process ran a file the layer targets" in done.stderr


@pytest.mark.parametrize("value, expected", [
    (f"synthetic-trainr={COPY}", "--otca_target: no spec is named 'synthetic-trainr'; did you mean synthetic-trainer?"),
    ("synthetic-trainer=trainer/nowhere.py", "--otca_target synthetic-trainer=trainer/nowhere.py: "),
])
def test_a_bad_otca_target_stops_the_launch_before_anything_starts(synthetic, value, expected):
    upstream, env = synthetic
    make_copy(upstream)
    done = launch(upstream, env, f"python {COPY} --out result.json", "--otca", "--otca_target", value)
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("otca-patch launch: error: ") and expected in done.stderr


def test_a_copy_whose_hook_points_do_not_hold_is_refused_by_the_preflight(synthetic):
    upstream, env = synthetic
    make_copy(upstream, lambda text: text.replace("return advantages", "return list(advantages)"))
    done = launch(upstream, env, f"python {COPY} --out result.json", "--otca", "--otca_target",
                  f"synthetic-trainer={COPY}")
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert "anchor not found" in done.stderr and COPY in done.stderr


def test_otca_patch_run_applies_the_named_spec_to_a_copy(synthetic):
    upstream, env = synthetic
    make_copy(upstream)
    run = [sys.executable, "-m", "otca_patch.cli", "run", COPY, "--out", "result.json", "--otca"]
    done = subprocess.run(run, cwd=upstream, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert done.stderr.startswith("otca-patch run: error: ") and f"--otca_target NAME={COPY}" in done.stderr
    done = subprocess.run(run + ["--otca_target", f"synthetic-trainer={COPY}"], cwd=upstream, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert result(upstream) == {"advantages": [-4.0, -2.0, 6.0], "argv": ["--out", "result.json"], "name": "__main__"}


def test_the_startup_hook_recognises_a_copy_without_importing_otca_patch(synthetic):
    """A script that is not a copy, in an environment that knows the trainer's shape, still pays
    nothing: no otca_patch module is imported to decide."""
    upstream, env = synthetic
    trainer = str(upstream / "trainer" / "train.py")
    env = dict(hook_environment(env, "--otca"), OTCA_PATCH_SHAPES=json.dumps([["synthetic-trainer", "trainer/train.py", trainer]]))
    probe = upstream / "other.py"
    probe.write_text("import json, sys\n\ndef advantages_for(x):\n    return x\n\n"
                     "print(json.dumps(sorted(m for m in sys.modules if m.startswith('otca_patch'))))\n")
    done = subprocess.run([sys.executable, "other.py"], cwd=upstream, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr
    make_copy(upstream)
    done = subprocess.run([sys.executable, COPY, "--out", "result.json"], cwd=upstream, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert done.stderr.startswith("otca-patch: error: trainer/train_mine.py is not a file the layer targets")


def test_doctor_checks_an_otca_target_and_lists_uncovered_trainers_and_missing_files(synthetic, tmp_path):
    upstream, env = synthetic
    make_copy(upstream, lambda text: text.replace("return advantages", "return list(advantages)"))
    (upstream / "trainer" / "train_other.py").write_text("print('another trainer')\n")
    patches = tmp_path / "patches"
    gone = (patches / "synthetic.toml").read_text().replace('name = "synthetic-trainer"', 'name = "synthetic-video"')
    (patches / "video.toml").write_text(gone.replace('file = "trainer/train.py"', 'file = "trainer/train_video.py"'))
    doctor = [sys.executable, "-m", "otca_patch.cli", "doctor", str(upstream)]
    done = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    uncovered = lines.index(next(line for line in lines if line.startswith("trainer files no spec covers (2;")))
    # the copy's hook point does not hold: no --otca_target advice (it could not work)
    assert lines[uncovered + 1].startswith("  trainer/train_mine.py (nearest spec: synthetic-trainer, ")
    assert "1 of its hook points and pins do not hold here, first hook scale" in lines[uncovered + 1]
    assert "--otca_target synthetic" not in lines[uncovered + 1]
    assert lines[uncovered + 2] == "  trainer/train_other.py", "not a copy of anything"
    make_copy(upstream)  # an unchanged copy: the spec holds, so the advice names it
    held = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120).stdout.splitlines()
    line = next(line for line in held if line.startswith("  trainer/train_mine.py"))
    assert line.startswith("  trainer/train_mine.py (a copy of trainer/train.py, ")
    assert line.endswith(f"synthetic-trainer's spec holds on it: --otca_target synthetic-trainer={COPY})")
    make_copy(upstream, lambda text: text.replace("return advantages", "return list(advantages)"))
    missing = next(line for line in lines if line.startswith("specs whose file this checkout lacks (1;"))
    assert lines[lines.index(missing) + 1].startswith("  synthetic-video: trainer/train_video.py")
    done = subprocess.run(doctor + ["--otca_target", f"synthetic-trainer={COPY}"], env=env, cwd=upstream,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, "the copy's hook point does not hold"
    assert f"synthetic-trainer ({COPY}): needs a new spec for 1 of 1: hook scale" in done.stdout
    assert "synthetic-trainer (trainer/train.py): holds" in done.stdout
    assert "  trainer/train_mine.py" not in done.stdout.splitlines(), "a file given to --otca_target is covered"


def test_an_explicit_name_picks_that_spec_for_a_path_two_specs_share(synthetic, tmp_path):
    """Another upstream's trainer at the same path (MixGRPO's fastvideo/train_grpo_flux.py is
    DanceGRPO's path): the spec --otca_target names applies there, and only it is checked."""
    upstream, env = synthetic
    patches, runtimes = tmp_path / "patches", tmp_path / "runtime"
    variant = (patches / "synthetic.toml").read_text().replace('name = "synthetic-trainer"', 'name = "synthetic-variant"')
    variant = variant.replace('runtime = "synthetic_runtime:Runtime"', 'runtime = "variant_runtime:Runtime"')
    (patches / "variant.toml").write_text(variant.replace('anchor = "return advantages"', 'anchor = "return list(advantages)"'))
    (runtimes / "variant_runtime.py").write_text((runtimes / "synthetic_runtime.py").read_text()
                                                 .replace("2.0 if", "10.0 if").replace('"synthetic-trainer"', '"synthetic-variant"'))
    trainer = upstream / "trainer" / "train.py"
    trainer.write_text(trainer.read_text().replace("return advantages", "return list(advantages)"))  # the variant's file
    # by content, the one spec whose hook points hold on the file applies (hooks/select.py)
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca")
    assert done.returncode == 0 and "synthetic-variant" in done.stderr, done.stderr
    assert result(upstream)["advantages"] == [-20.0, -10.0, 30.0]
    # an explicit name wins over the content's choice: the other spec is applied, and refuses the file
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca", "--otca_target",
                  "synthetic-trainer=trainer/train.py")
    assert done.returncode == 2 and "anchor not found" in done.stderr, done.stderr
    (upstream / "result.json").unlink()
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca", "--otca_target",
                  "synthetic-variant=trainer/train.py")
    assert done.returncode == 0, done.stderr
    assert result(upstream)["advantages"] == [-20.0, -10.0, 30.0]
    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(upstream), "--otca_target",
                             "synthetic-variant=trainer/train.py"], env=env, capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0, doctor.stdout
    assert "synthetic-variant (trainer/train.py): holds" in doctor.stdout and "synthetic-trainer" not in doctor.stdout


def test_doctor_calls_a_trainer_without_a_grpo_loss_not_grpo_and_suggests_no_target(synthetic):
    """A DPO-like variant of the covered trainer (most of its lines, a preference loss instead of
    an advantage times a ratio, hooks.trainer_kind): launch it without --otca, no --otca_target."""
    upstream, env = synthetic
    dpo = upstream / "trainer" / "train_dpo.py"
    dpo.write_text((upstream / "trainer" / "train.py").read_text()
                   + "\n\ndef preference_step(chosen, rejected, loss_fn):\n"
                     "    loss = loss_fn(chosen - rejected)\n    loss.backward()\n")
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(upstream)], env=env,
                          capture_output=True, text=True, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("  trainer/train_dpo.py"))
    assert line == ("  trainer/train_dpo.py (not a GRPO trainer: launch it without --otca; it trains no group "
                    "advantage OTCA could replace)")


def test_where_otca_patch_cannot_be_imported_the_start_up_hook_asks_doctor_instead_of_guessing(synthetic, tmp_path):
    """The copy check runs in processes whose Python may lack otca_patch: it then gives no verdict of
    its own (which could contradict doctor) but doctor's command for this file."""
    upstream, env = synthetic
    shadow = tmp_path / "shadow" / "otca_patch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed in this environment')\n")
    trainer = str(upstream / "trainer" / "train.py")
    env = dict(hook_environment(env, "--otca"), OTCA_PATCH_SHAPES=json.dumps([["synthetic-trainer", "trainer/train.py", trainer]]))
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"].split(os.pathsep)[0], str(shadow.parent), env["PYTHONPATH"]])
    make_copy(upstream)
    done = subprocess.run([sys.executable, COPY, "--out", "result.json"], cwd=upstream, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert done.stderr.strip() == (
        f"otca-patch: error: {COPY} is not a file the layer targets but shares 100% of the lines of trainer/train.py "
        f"(spec synthetic-trainer), so it would train unpatched; `otca-patch doctor {upstream} --otca_target "
        f"synthetic-trainer={COPY}` says whether it is a GRPO trainer and whether that spec holds on it; if it holds, "
        f"run it patched with --otca_target synthetic-trainer={COPY} among the otca-patch flags, or launch without --otca")
