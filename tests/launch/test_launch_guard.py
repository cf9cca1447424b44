"""Under ``otca-patch launch --otca`` no optimizer step completes without the layer.

A tiny stand-in trainer (the synthetic target of test_launch.py, taking real ``torch.optim`` steps)
writes a marker file after each completed step, saying whether the layer's runtime was installed in
its process. The launch forms and their outcomes are one table, tests/launch/test_fault_matrix.py,
which uses this stand-in; here are the checks that are no launch form: the copy rule, the program
token, signals while the launch waits, a fork of an unpatched process. (Launches that build their
script's path at run time reach the step guard: one the launch names is refused by the pre-flight
before it runs, tests/launch/test_launch_preflight.py.)"""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
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


# ---- what the watch sees: forks, execs in place, processes that outlive the launch's top process

def test_a_fork_of_a_process_the_layer_did_not_patch_is_still_stopped_at_its_first_step(stand_in):
    upstream, env = stand_in
    variant = derivative(upstream)
    variant.write_text(variant.read_text().replace('if __name__ == "__main__":\n    main()',
                       'if __name__ == "__main__":\n    import multiprocessing\n'
                       '    child = multiprocessing.get_context("fork").Process(target=main)\n'
                       '    child.start()\n    child.join()\n    sys.exit(child.exitcode)'))
    done = launch(upstream, env, "v=variant; python trainer/train_$v.py --out steps", "--otca")
    assert done.returncode != 0
    assert markers(upstream) == [], "no optimizer step may complete without the layer"
    stop = [l for l in done.stderr.splitlines() if l.startswith("otca-patch launch: error: ") and "optimizer step" in l]
    assert stop and "trainer/train_variant.py (pid" in stop[0], done.stderr[-4000:]
    assert "never checked in" not in done.stderr, "the fork checked in: the step guard stops it, not the watch"


def test_a_checked_in_process_that_outlives_the_top_process_is_waited_for(stand_in):
    upstream, env = stand_in
    done = launch(upstream, env, "(sleep 1; python trainer/train.py --out steps) > /dev/null 2>&1 &", "--otca")
    assert done.returncode == 0, done.stderr[-4000:]
    # the subshell, with its sleep or the trainer once the launch script's shell has forked them
    assert re.search(r"the launch's top process ended \(status 0\) while \d+ process(es)? it started still runs?: "
                     r"pid \d+ `bash ", done.stderr), done.stderr[-4000:]
    assert re.search(r"the \d+ process(es)? that outlived the launch's top process ended\n", done.stderr)
    steps = markers(upstream)
    assert len(steps) == STEPS and all(step["layer"] and step["advantages"] == PATCHED_ADVANTAGES for step in steps)


def test_a_signal_while_the_launch_waits_for_what_outlived_its_top_process_stops_it(stand_in):
    upstream, env = stand_in
    script = upstream / "launch.sh"
    script.write_text("python trainer/train.py --out steps\nsleep 600 &\n")
    wrapper = subprocess.Popen([str(REPO / "scripts" / "otca_run.sh"), str(script), "--otca"], cwd=upstream, env=env,
                               stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in wrapper.stderr:  # until the launch says what outlived its top process
            lines.append(line)
            if "the launch's top process ended" in line:
                break
        waiting = [int(pid) for pid in re.findall(r"pid (\d+) `", lines[-1])]
        assert waiting, "".join(lines)
        time.sleep(1)
        wrapper.send_signal(signal.SIGTERM)
        rest = wrapper.stderr.read()
        assert wrapper.wait(timeout=120) == 128 + signal.SIGTERM, rest
    finally:
        wrapper.kill()
    assert "error: stopped by SIGTERM while processes that outlived the launch's top process still ran" in rest
    for pid in waiting:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


EXEC_PROBE = textwrap.dedent('''\
    import importlib.util, os, sys, time
    spec = importlib.util.spec_from_file_location("hook", sys.argv[1])
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)  # no $OTCA_PATCH_ARGS: it checks nothing in
    program = hook._program()
    fork = os.fork()
    if fork == 0:
        time.sleep(60)
        os._exit(0)
    print(program, fork, flush=True)
    sys.stdin.readline()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"])
''')


@pytest.mark.parametrize("layout", ["randomised", "fixed"])
def test_the_program_token_the_hook_writes_is_held_by_a_fork_and_closed_by_an_exec(layout):
    """An exec in place is seen whatever the address layout: under ``setarch -R`` (no address
    randomisation) as well, the exec'd program lacks the token."""
    sys.path.insert(0, str(REPO))
    from otca_patch.launch import watch

    prefix = ["setarch", os.uname().machine, "-R"] if layout == "fixed" else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTCA_PATCH_")}
    probe = subprocess.Popen([*prefix, sys.executable, "-c", EXEC_PROBE, str(REPO / "otca_patch/launch/startup/sitecustomize.py")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    fork = None
    try:
        written, fork = probe.stdout.readline().split()
        assert re.fullmatch(r"\d+:otca-checkin-[0-9a-f]{12}", written), written
        assert watch.holds(probe.pid, written)
        assert watch.holds(int(fork), written), "a fork runs the same program"
        assert watch.held_tokens(int(fork)) == {written.partition(":")[2]}
        probe.stdin.write("\n")
        probe.stdin.flush()
        for _ in range(600):  # a hang guard: until the exec has happened
            if watch.command_line(probe.pid)[-1:] == ["import time; time.sleep(60)"]:
                break
            time.sleep(0.1)
        assert not watch.holds(probe.pid, written), "an exec in place closes the token"
        assert watch.held_tokens(probe.pid) == set()
        assert watch.stat(probe.pid)[0] != "Z"
    finally:
        probe.kill()
        probe.wait()
        if fork is not None:
            os.kill(int(fork), 9)
