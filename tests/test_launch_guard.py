"""Issue 26: under ``otca-patch launch --otca`` no optimizer step completes without the layer.

A tiny stand-in trainer (the synthetic target of test_launch.py, taking real ``torch.optim`` steps)
writes a marker file after each completed step, saying whether the layer's runtime was installed in
its process. It is launched through every launch form: by path, as ``-m``, under torchrun (also as
``-m``), under ``accelerate launch -m``: patched, every step. Under ``python -I`` / ``-E`` / ``-S`` /
``env -i`` the start-up hook never runs: the wrapper's tree watch stops the launch. A renamed
derivative, a DPO-style script and a module no spec covers take steps without the layer: the step
guard stops each at its first step. (Those launches build their script's path at run time: one the
launch names is refused by the pre-flight before it runs, tests/test_launch_preflight.py.)"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_launch import REPO, launch, synthetic_upstream

pytestmark = pytest.mark.slow

STEPS = 2

STAND_IN = textwrap.dedent('''\
    import json, os, sys
    import torch

    def advantages_for(rewards):
        advantages = [r - sum(rewards) / len(rewards) for r in rewards]
        return advantages

    def main():
        out = sys.argv[sys.argv.index("--out") + 1]
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(STEPS):
            advantages = advantages_for([1.0, 2.0, 6.0])
            loss = model(torch.ones(1, 2)).sum() * advantages[0]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            marker = os.path.join(out, f"step{step}-pid{os.getpid()}.json")
            with open(marker, "w") as handle:
                json.dump({"layer": "__otca__" in globals(), "advantages": advantages}, handle)

    if __name__ == "__main__":
        main()
''').replace("STEPS", str(STEPS))

#: each patched step's advantages: the synthetic runtime scales upstream's [-2, -1, 3] by 2 (--otca)
PATCHED_ADVANTAGES = [-4.0, -2.0, 6.0]


@pytest.fixture()
def stand_in(tmp_path):
    upstream, env = synthetic_upstream(tmp_path, STAND_IN, _runtime())
    bin_dir = tmp_path / "bin"  # torchrun / accelerate as pip installs them, for this Python
    bin_dir.mkdir()
    for name, entry in (("torchrun", "torch.distributed.run"), ("accelerate", "accelerate.commands.accelerate_cli")):
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom {entry} import main\nsys.exit(main())\n")
        script.chmod(0o755)
    env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", OMP_NUM_THREADS="1")
    (upstream / "steps").mkdir()
    return upstream, env


def _runtime():
    from test_launch import RUNTIME

    return RUNTIME


def markers(upstream: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((upstream / "steps").glob("*.json"))]


PORT = 29700 + os.getpid() % 200


@pytest.mark.parametrize("line", [
    "python trainer/train.py --out steps",
    "python -m trainer.train --out steps",
    f"torchrun --nproc_per_node 1 --master_port {PORT} trainer/train.py --out steps",
    f"torchrun --nproc_per_node 1 --master_port {PORT + 1} -m trainer.train --out steps",
    f"python -m torch.distributed.run --nproc_per_node 1 --master_port {PORT + 2} -m trainer.train --out steps",
    "accelerate launch --cpu --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no "
    "-m trainer.train --out steps",
], ids=["path", "module", "torchrun", "torchrun-module", "torch.distributed.run-module", "accelerate-module"])
def test_every_launch_form_of_the_target_trains_patched_every_step(stand_in, line):
    upstream, env = stand_in
    done = launch(upstream, env, line, "--otca")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "rewritten by" in done.stderr, done.stderr[-4000:]
    steps = markers(upstream)
    assert len(steps) == STEPS, done.stderr[-4000:]
    assert all(step["layer"] and step["advantages"] == PATCHED_ADVANTAGES for step in steps), steps


def site_packages() -> str:
    return os.pathsep.join(path for path in sys.path if path.endswith("site-packages"))


@pytest.mark.parametrize("line, reason", [
    ("python -I trainer/train.py --out steps", "started with -I"),
    ("python -E trainer/train.py --out steps", "started with -E"),
    (f'PYTHONPATH="$PYTHONPATH:{site_packages()}" python -S trainer/train.py --out steps', "started with -S"),
    (f"env -i PATH=/usr/bin:/bin {sys.executable} trainer/train.py --out steps", "does not carry the start-up hook"),
    ('PYTHONPATH="' + os.pathsep.join(p for p in sys.path if p and "startup" not in p) + '" python trainer/train.py --out steps',
     "does not carry the start-up hook"),
], ids=["-I", "-E", "-S", "env -i", "PYTHONPATH replaced"])
def test_a_python_the_start_up_hook_never_reaches_stops_the_launch(stand_in, line, reason):
    upstream, env = stand_in
    done = launch(upstream, env, line, "--otca")
    assert done.returncode == 2, done.stderr[-4000:]
    assert markers(upstream) == [], "no optimizer step may complete without the layer"
    stop = [l for l in done.stderr.splitlines() if "never checked in with the layer" in l]
    assert len(stop) == 1 and reason in stop[0] and "trainer/train.py --out steps" in stop[0], done.stderr[-4000:]
    assert "no process ran a file the layer targets" not in done.stderr, "one message, not two"


def test_without_otca_those_launches_train_as_published(stand_in):
    upstream, env = stand_in
    done = launch(upstream, env, "python -I trainer/train.py --out steps")
    assert done.returncode == 0, done.stderr[-4000:]
    steps = markers(upstream)
    assert len(steps) == STEPS and not any(step["layer"] for step in steps)


VARIANT = textwrap.dedent('''\
    # my variant: the group advantage under another name, the loop rewritten around a GRPO loss
    import json, os, sys
    import torch

    def group_baseline(scores):
        mean = sum(scores) / len(scores)
        return [s - mean for s in scores]

    def main():
        folder = sys.argv[-1]
        net = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for it in range(STEPS):
            advantages = torch.tensor(group_baseline([1.0, 2.0, 6.0]))
            log_prob = net(torch.ones(3, 2)).squeeze(-1)
            ratio = torch.exp(log_prob - log_prob.detach())
            objective = (-advantages * ratio).mean()
            opt.zero_grad()
            objective.backward()
            opt.step()
            with open(os.path.join(folder, f"step{it}-pid{os.getpid()}.json"), "w") as out:
                json.dump({"layer": "__otca__" in globals()}, out)

    if __name__ == "__main__":
        main()
''').replace("STEPS", str(STEPS))
#: a preference-style variant: it trains a loss of its own, no advantage times a likelihood ratio
NOT_GRPO_VARIANT = VARIANT.replace("(-advantages * ratio).mean()", "-torch.nn.functional.logsigmoid(log_prob[2] - log_prob[0])")


def derivative(upstream: Path) -> Path:
    """A renamed, rewritten variant of the stand-in: below doctor's copy share, so it starts."""
    path = upstream / "trainer" / "train_variant.py"
    path.write_text(VARIANT)
    return path


@pytest.mark.parametrize("line, expected", [
    ("v=variant; python trainer/train_$v.py --out steps",
     ["trainer/train_variant.py (pid", "a GRPO trainer that no spec covers: it needs a spec of its own"]),
    (f"v=variant; torchrun --nproc_per_node 1 --master_port {PORT + 3} -m trainer.train_$v --out steps",
     ["-m trainer.train_variant (pid", "it needs a spec of its own, not --otca_target"]),
    ("v=sd3_dpo; python trainer/train_$v.py --out steps", ["not a GRPO trainer: launch it without --otca"]),
    ('v=variant; python -c "import runpy, sys; sys.argv = [\'x\', \'--out\', \'steps\']; '
     'runpy.run_path(\'trainer/train_$v.py\', run_name=\'__main__\')"', ["python -c", "without the layer"]),
], ids=["renamed derivative", "derivative as module under torchrun", "DPO-style", "python -c"])
def test_training_without_the_layer_stops_at_its_first_step(stand_in, line, expected):
    upstream, env = stand_in
    variant = derivative(upstream)
    (upstream / "trainer" / "train_sd3_dpo.py").write_text(NOT_GRPO_VARIANT)
    done = launch(upstream, env, line, "--otca")
    assert done.returncode != 0
    assert markers(upstream) == [], "no optimizer step may complete without the layer"
    stop = [l for l in done.stderr.splitlines() if l.startswith("otca-patch launch: error: ") and "optimizer step" in l]
    assert stop, done.stderr[-4000:]
    for part in expected:
        assert part in stop[0], stop[0]


def test_a_copy_stops_at_start_by_the_rule_doctor_applies_even_with_renamed_functions(stand_in):
    """Most of the trainer's lines, its hooked function renamed: a copy for doctor, and so for the launch."""
    upstream, env = stand_in
    copy = upstream / "trainer" / "train_mine.py"
    copy.write_text((upstream / "trainer" / "train.py").read_text().replace("advantages_for", "group_advantages"))
    done = launch(upstream, env, "v=mine; python trainer/train_$v.py --out steps", "--otca")
    assert done.returncode == 2 and markers(upstream) == []
    # what doctor says of it: the stand-in's loss is no advantage times a likelihood ratio (hooks.trainer_kind)
    assert "trainer/train_mine.py is not a file the layer targets: not a GRPO trainer" in done.stderr, done.stderr


def test_a_target_path_with_a_colon_is_patched(stand_in):
    upstream, env = stand_in
    folder = upstream / "runs 12:30"
    folder.mkdir()
    copy = folder / "train.py"
    copy.write_text("# copied at 12:30\n" + (upstream / "trainer" / "train.py").read_text())
    done = launch(upstream, env, f"python 'runs 12:30/train.py' --out steps", "--otca", "--otca_target",
                  "synthetic-trainer=runs 12:30/train.py")
    assert done.returncode == 0, done.stderr[-4000:]
    steps = markers(upstream)
    assert len(steps) == STEPS and all(step["layer"] for step in steps)


def test_interpreter_flags_are_read_from_the_command_line():
    sys.path.insert(0, str(REPO))
    from otca_patch.launch.watch import interpreter_flags

    assert interpreter_flags(["python", "-I", "train.py", "-S"]) == {"I"}
    assert interpreter_flags(["python", "-u", "-X", "dev", "-ES", "-m", "mod", "-I"]) == {"u", "E", "S"}
    assert interpreter_flags(["python", "-Wignore", "-sI", "-c", "pass"]) == {"s", "I"}
    assert interpreter_flags(["python3", "train.py"]) == set()


def test_the_module_a_launcher_runs_is_resolved_without_importing_it(tmp_path):
    """``-m pkg.mod``: the start-up hook finds pkg/mod.py from the working directory; pkg's
    ``__init__`` does not run to find it."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (tmp_path / "pkg" / "mod.py").write_text("")
    probe = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('hook', sys.argv[1]); "
             "hook = importlib.util.module_from_spec(spec); sys.argv = ['-m']; "
             "import os; os.environ.pop('OTCA_PATCH_ARGS', None); spec.loader.exec_module(hook); "
             "print(hook._module_file('pkg.mod'), hook._module_file('pkg.nothing'), hook._module_file('json'))")
    done = subprocess.run([sys.executable, "-c", probe, str(REPO / "otca_patch/launch/startup/sitecustomize.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=dict(os.environ, OTCA_PATCH_ARGS=""))
    assert done.returncode == 0, done.stderr
    found, missing, package = done.stdout.split()
    assert found == str(tmp_path / "pkg" / "mod.py") and missing == "None"
    assert package.endswith(os.path.join("json", "__main__.py")) or package == "None"
