"""What the launch says, each in one line, naming the launch's own things: a ``-c`` program by its first
line, set-up commands by full path, a missing launcher, a forced DPO trainer, a trainer path that does
not exist, and doctor's list of every trainer file a launch would judge."""
import os
import subprocess
import sys

from test_launch import REPO, synthetic  # noqa: F401  (a fixture)
from test_launch_guard import NOT_GRPO_VARIANT
from test_launch_preflight import assert_refused_before_it_ran, error_lines, wrapper, write_script

sys.path.insert(0, str(REPO))

from otca_patch.launch import reach, watch  # noqa: E402


def test_a_multi_line_c_program_is_shown_by_its_first_line():
    program = "import os\nimport sys\nos.execv(sys.executable, [sys.executable, '-I', 'train.py'])"
    assert watch.shown_command(1, ["python", "-c", program]) == "python -c 'import os …'"
    assert watch.named(7, ["python", "-c", "import time; time.sleep(9)"]) == "pid 7 `python -c 'import time; time.sleep(9)'`"
    assert watch.named(7, []) == "pid 7", "a process whose command line is gone is named once"


def test_the_start_up_hook_shows_a_multi_line_c_program_by_its_first_line(tmp_path):
    probe = ("import importlib.util, sys\n"
             "spec = importlib.util.spec_from_file_location('hook', sys.argv[1])\n"
             "hook = importlib.util.module_from_spec(spec); spec.loader.exec_module(hook)\n"
             "print(hook._what_runs()[0])")
    env = dict(os.environ, OTCA_PATCH_ARGS="")
    done = subprocess.run([sys.executable, "-c", probe, str(REPO / "otca_patch/launch/startup/sitecustomize.py")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.strip() == "python -c 'import importlib.util, sys …'", done.stderr


def test_set_up_commands_by_full_path_are_named():
    text = "/opt/env/bin/pip install -e .\n$VENV/bin/pip3 install -r r.txt\ncd HPSv2 && /usr/bin/python3 -m pip install .\n"
    assert reach.setup_commands(text) == ["/opt/env/bin/pip install -e .", "$VENV/bin/pip3 install -r r.txt",
                                          "/usr/bin/python3 -m pip install ."]


def test_a_missing_torchrun_is_named_instead_of_advising_otca_target(synthetic):
    upstream, env = synthetic
    script = write_script(upstream, "torchrun --nproc_per_node 1 trainer/train.py --out result.json")
    done = wrapper(upstream, dict(env, PATH="/usr/bin:/bin"), str(script), "--otca")
    assert done.returncode == 127, done.stderr
    [line] = error_lines(done.stderr)
    assert line.endswith("before any process ran a file the layer targets: torchrun is not on the launch's PATH; "
                         "activate the training environment that provides it (or give its full path)"), line
    assert "--otca_target" not in line


def test_a_dpo_trainer_forced_with_otca_target_is_called_not_a_grpo_trainer(synthetic):
    upstream, env = synthetic
    (upstream / "trainer" / "train_dpo.py").write_text(NOT_GRPO_VARIANT)
    script = write_script(upstream, "touch started\npython trainer/train_dpo.py --out result.json")
    line = assert_refused_before_it_ran(
        wrapper(upstream, env, str(script), "--otca", "--otca_target", "synthetic-trainer=trainer/train_dpo.py"), upstream)
    assert line.startswith("otca-patch launch: error: --otca_target synthetic-trainer=trainer/train_dpo.py: "
                           "trainer/train_dpo.py is not a GRPO trainer: launch it without --otca (no spec patches a "
                           "trainer without group-relative advantages; synthetic-trainer's spec does not hold on it: "), line


def test_a_script_naming_a_trainer_file_that_does_not_exist_says_so(synthetic):
    upstream, env = synthetic
    script = write_script(upstream, "touch started\npython trainer/train_grpo_flux.py --out result.json")
    line = assert_refused_before_it_ran(wrapper(upstream, env, str(script), "--otca"), upstream)
    assert "runs trainer/train_grpo_flux.py, which does not exist (trainer/train_grpo_flux.py from " in line, line


def test_doctor_lists_every_trainer_file_a_launch_would_judge(synthetic):
    upstream, env = synthetic
    trainer = (upstream / "trainer" / "train.py").read_text()
    for file in ("my_train_x.py", "qwen_reward/train_q.py", "trainer_edited/train.py"):
        (upstream / file).parent.mkdir(exist_ok=True)
        (upstream / file).write_text(trainer)
    (upstream / "tools").mkdir()
    (upstream / "tools" / "train_utils.py").write_text("def lr(step):\n    return 0.1\n")  # nothing to judge
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", "."], cwd=upstream, env=env,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    listed = [line.split(" (", 1)[0].strip() for line in out.splitlines() if line.startswith("  ") and "(" in line]
    for file in ("my_train_x.py", "qwen_reward/train_q.py", "trainer_edited/train.py"):
        assert file in listed, out
    assert "tools/train_utils.py" not in out


def test_a_python_interpreter_is_recognised_by_what_it_runs_not_by_its_name(tmp_path):
    import shutil
    import time

    renamed = tmp_path / "trainer"
    shutil.copy2(os.path.realpath(sys.executable), renamed)
    processes = [subprocess.Popen([str(renamed), "-I", "-c", "import time; time.sleep(60)"]),  # as made/bin/trainer
                 subprocess.Popen(["sleep", "60"])]
    try:
        for process in processes:  # a hang guard: until each has exec'd (its command line is its own)
            for _ in range(600):
                if watch.command_line(process.pid) == process.args:
                    break
                time.sleep(0.05)
        assert watch.is_python(processes[0].pid), "a copy of the interpreter under another name is a Python"
        assert not watch.is_python(processes[1].pid)
    finally:
        for process in processes:
            process.kill()
            process.wait()
