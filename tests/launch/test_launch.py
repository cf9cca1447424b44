"""The launch path end to end on a synthetic upstream: scripts/otca_run.sh -> bash launch script with
fixed arguments -> python (and torchrun) -> startup hook -> rewritten script as __main__."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from free_port import free_port

REPO = Path(__file__).resolve().parents[2]

TRAINER = textwrap.dedent('''\
    import json, sys

    def advantages_for(rewards):
        advantages = [r - sum(rewards) / len(rewards) for r in rewards]
        return advantages

    if __name__ == "__main__":
        out = sys.argv[sys.argv.index("--out") + 1]
        with open(out, "w") as handle:
            json.dump({"advantages": advantages_for([1.0, 2.0, 6.0]), "argv": sys.argv[1:], "name": __name__}, handle)
''')

SPEC = textwrap.dedent('''\
    [target]
    name = "synthetic-trainer"
    upstream = "Synthetic"
    file = "trainer/train.py"
    runtime = "synthetic_runtime:Runtime"
    verified_commit = "0000000000000000000000000000000000000000"
    verified_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

    [[hooks]]
    name = "scale"
    function = "advantages_for"
    anchor = "return advantages"
    action = "replace"
    code = "return __otca__.scale(advantages)"
    reads = ["advantages"]
''')

RUNTIME = textwrap.dedent('''\
    class Runtime:
        def __init__(self, config, spec):
            self.factor = 2.0 if config.otca_mode == "otca" else 3.0
        def describe(self):
            return "synthetic"
        def scale(self, values):
            return [self.factor * v for v in values]
''')


@pytest.fixture()
def synthetic(tmp_path):
    return synthetic_upstream(tmp_path, TRAINER, RUNTIME)


def synthetic_upstream(tmp_path: Path, trainer: str, runtime: str) -> tuple[Path, dict]:
    """An upstream checkout holding ``trainer`` at trainer/train.py, its spec (SPEC) and ``runtime``,
    and the environment that finds them."""
    upstream = tmp_path / "upstream"
    (upstream / "trainer").mkdir(parents=True)
    (upstream / "trainer" / "train.py").write_text(trainer)
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "synthetic.toml").write_text(SPEC)
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir()
    (runtime_dir / "synthetic_runtime.py").write_text(runtime)
    env = dict(os.environ, OTCA_PATCHES_DIR=str(patches), OTCA_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(runtime_dir), str(REPO)]), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("OTCA_PATCH_ARGS", None)
    return upstream, env


def launch(upstream: Path, env: dict, launcher_line: str, *flags: str) -> subprocess.CompletedProcess:
    script = upstream / "launch.sh"
    script.write_text(f"set -e\n{launcher_line}\n")  # fixed arguments, no "$@", as upstream's scripts
    # a hang guard, not a measure: torchrun's two ranks alone take about a minute on a loaded machine
    return subprocess.run([str(REPO / "scripts" / "otca_run.sh"), str(script), *flags], cwd=upstream, env=env,
                          capture_output=True, text=True, timeout=900)


def test_without_otca_the_script_runs_untouched(synthetic):
    upstream, env = synthetic
    done = launch(upstream, env, "python trainer/train.py --out result.json --lr 1")
    assert done.returncode == 0, done.stderr
    result = json.loads((upstream / "result.json").read_text())
    assert result == {"advantages": [-2.0, -1.0, 3.0], "argv": ["--out", "result.json", "--lr", "1"], "name": "__main__"}
    assert "untouched" in done.stderr


def test_with_otca_every_process_runs_the_rewritten_script(synthetic):
    upstream, env = synthetic
    done = launch(upstream, env, "python trainer/train.py --out result.json --lr 1", "--otca", "--otca_mode", "tcd")
    assert done.returncode == 0, done.stderr
    result = json.loads((upstream / "result.json").read_text())
    # the hook scaled upstream's advantages; upstream's argv never sees the layer's flags
    assert result == {"advantages": [-6.0, -3.0, 9.0], "argv": ["--out", "result.json", "--lr", "1"], "name": "__main__"}
    assert "rewritten by" in done.stderr


@pytest.mark.slow
def test_torchrun_workers_are_patched(synthetic):
    upstream, env = synthetic
    torchrun = shutil.which("torchrun", path=env["PATH"])
    assert torchrun, "torchrun is installed with torch"
    line = f"torchrun --nproc_per_node 2 --master_port {free_port()} trainer/train.py --out result.json"
    # both ranks write the same file; each computes the rewritten advantages
    done = launch(upstream, env, line, "--otca")
    assert done.returncode == 0, done.stderr
    assert json.loads((upstream / "result.json").read_text())["advantages"] == [-4.0, -2.0, 6.0]
    assert done.stderr.count("rewritten by") == 2


def test_a_missing_anchor_stops_the_run_before_it_starts(synthetic):
    upstream, env = synthetic
    trainer = upstream / "trainer" / "train.py"
    trainer.write_text(trainer.read_text().replace("return advantages", "return list(advantages)"))
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca")
    assert done.returncode == 2
    assert not (upstream / "result.json").exists(), "the trainer must not run vanilla silently"
    for part in ("trainer/train.py", "function advantages_for", "return advantages", "anchor not found",
                 "0000000000000000000000000000000000000000"):
        assert part in done.stderr


def test_the_worker_itself_refuses_a_broken_file_even_without_preflight(synthetic):
    """A launch script that builds the path at run time escapes the preflight; the worker still stops."""
    upstream, env = synthetic
    trainer = upstream / "trainer" / "train.py"
    trainer.write_text(trainer.read_text().replace("return advantages", "return list(advantages)"))
    done = launch(upstream, env, 'name=train; python "trainer/${name}.py" --out result.json', "--otca")
    assert done.returncode != 0
    assert not (upstream / "result.json").exists()
    assert "PatchError" in done.stderr or "anchor not found" in done.stderr


def test_unknown_flag_is_refused(synthetic):
    upstream, env = synthetic
    done = launch(upstream, env, "python trainer/train.py --out result.json", "--otca", "--otca_mdoe", "tcd")
    assert done.returncode == 2 and "unknown flag --otca_mdoe" in done.stderr
    assert not (upstream / "result.json").exists()


def test_doctor_reports_holding_and_broken_hooks(synthetic, tmp_path):
    upstream, env = synthetic
    doctor = [sys.executable, "-m", "otca_patch.cli", "doctor", str(upstream)]
    done = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "scale" in done.stdout and "1 of 1 hook points hold" in done.stdout
    # the verdict is the last line, after the per-hook details
    assert done.stdout.strip().splitlines()[-1] == ("doctor: passed: 1 of 1 hook points hold, 1 of 1 targets; "
                                                    "--otca can run every target here")
    trainer = upstream / "trainer" / "train.py"
    trainer.write_text(trainer.read_text().replace("return advantages", "return list(advantages)"))
    done = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "FAIL: anchor not found, expected exactly 1" in done.stdout and "0 of 1 hook points hold" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("doctor: failed: 0 of 1 hook points hold, 0 of 1 targets")
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(doctor[:-1] + [str(empty)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"{empty} is empty" in done.stderr
    (empty / "README.md").write_text("not an upstream checkout")
    done = subprocess.run(doctor[:-1] + [str(empty)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds none of the files" in done.stderr


# ---- fail closed: once a process is targeted, nothing runs it unpatched


def hook_environment(env: dict, args: str) -> dict:
    """What scripts/otca_run.sh hands every process (startup hook first on PYTHONPATH), with ``args``
    as the flags: the way an invalid value would reach a worker."""
    startup = REPO / "otca_patch" / "launch" / "startup"
    return dict(env, OTCA_PATCH_ARGS=args, OTCA_PATCH_TARGETS='["trainer/train.py"]',
                PYTHONPATH=os.pathsep.join([str(startup), env["PYTHONPATH"]]))


@pytest.mark.parametrize("args, script_args, expected", [
    ("--otca --otca_w_min 5", [], "w_min"),
    ("--otca --otca_mdoe tcd", [], "unknown flag --otca_mdoe"),
    ("--otca --otca_rewards 'upstream", [], "quotation"),
    ("--otca", ["--otca_mode", "bogus"], "--otca_mode"),
])
def test_a_bad_value_reaching_a_worker_stops_it(synthetic, args, script_args, expected):
    upstream, env = synthetic
    done = subprocess.run([sys.executable, "trainer/train.py", "--out", "result.json", *script_args], cwd=upstream,
                          env=hook_environment(env, args), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert not (upstream / "result.json").exists(), "the trainer must not run unpatched"
    assert "otca-patch: error:" in done.stderr and expected in done.stderr


def test_a_missing_patches_folder_stops_the_worker(synthetic, tmp_path):
    upstream, env = synthetic
    env = dict(hook_environment(env, "--otca"), OTCA_PATCHES_DIR=str(tmp_path / "nowhere"))
    done = subprocess.run([sys.executable, "trainer/train.py", "--out", "result.json"], cwd=upstream, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert "nowhere" in done.stderr and "does not exist" in done.stderr


def test_a_worker_python_without_otca_patch_stops_with_a_clear_message(synthetic):
    """torchrun from another environment: the startup hook runs, but otca_patch cannot be imported."""
    upstream, env = synthetic
    bare = Path(sys.base_prefix) / "bin" / "python3"
    startup = REPO / "otca_patch" / "launch" / "startup"
    env = dict(env, OTCA_PATCH_ARGS="--otca", OTCA_PATCH_TARGETS='["trainer/train.py"]', PYTHONPATH=str(startup))
    assert subprocess.run([str(bare), "-c", "import otca_patch"], cwd=upstream, env=env, capture_output=True).returncode != 0
    done = subprocess.run([str(bare), "trainer/train.py", "--out", "result.json"], cwd=upstream, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not (upstream / "result.json").exists()
    assert "cannot import otca_patch" in done.stderr and "pip install" in done.stderr


def test_an_untargeted_process_pays_nothing_and_sees_no_helper_modules(synthetic):
    upstream, env = synthetic
    probe = upstream / "other.py"
    probe.write_text(textwrap.dedent('''\
        import importlib.util, json, sys
        print(json.dumps({"loaded": sorted(m for m in sys.modules if m.startswith("otca_patch")),
                          "helpers": [n for n in ("reexec", "passthrough", "worker") if importlib.util.find_spec(n)]}))
    '''))
    done = subprocess.run([sys.executable, "other.py"], cwd=upstream, env=hook_environment(env, "--otca"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"loaded": [], "helpers": []}


def test_run_without_otca_behaves_like_python_script(synthetic, tmp_path):
    upstream, env = synthetic
    (upstream / "trainer" / "sibling.py").write_text("VALUE = 7\n")
    script = upstream / "trainer" / "uses_sibling.py"
    script.write_text("import sys, sibling\nprint(sys.path[0], sibling.VALUE, sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "run", str(script), "a", "--b"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(script.parent), "7", "['a',", "'--b']"]


def test_run_on_a_missing_script_is_a_clear_error(synthetic, tmp_path):
    _, env = synthetic
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "run", "nowhere/train.py", "--otca"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "nowhere/train.py does not exist" in done.stderr


def test_the_worker_keeps_the_interpreter_options(monkeypatch):
    from otca_patch.launch import reexec

    monkeypatch.setattr(sys, "orig_argv", ["python3", "-u", "-X", "dev", "-W", "error", "train.py", "--lr", "1"])
    monkeypatch.setattr(sys, "argv", ["train.py", "--lr", "1"])
    assert reexec.worker_argv() == [sys.executable, "-u", "-X", "dev", "-W", "error", "-m", "otca_patch.launch.worker",
                                    "train.py", "--lr", "1"]


def test_an_environment_without_the_targets_fails_closed_only_when_it_asks_for_the_layer(synthetic):
    upstream, env = synthetic
    startup = REPO / "otca_patch" / "launch" / "startup"
    base = dict(env, PYTHONPATH=os.pathsep.join([str(startup), env["PYTHONPATH"]]))
    run = lambda args: subprocess.run([sys.executable, "trainer/train.py", "--out", "result.json"], cwd=upstream,
                                      env=dict(base, OTCA_PATCH_ARGS=args), capture_output=True, text=True, timeout=120)
    done = run("--otca --otca_mode tcd")
    assert done.returncode == 2 and "OTCA_PATCH_TARGETS" in done.stderr and not (upstream / "result.json").exists()
    done = run("--otca_mode tcd")  # flags without --otca: the layer is not asked for
    assert done.returncode == 0, done.stderr
    assert json.loads((upstream / "result.json").read_text())["advantages"] == [-2.0, -1.0, 3.0]


def test_a_launch_script_that_starts_its_trainers_through_pdsh_is_refused_with_otca(tmp_path):
    """MixGRPO's launch scripts run torchrun on every host through pdsh, which does not carry the
    layer's environment: with --otca those trainers would run vanilla, so the launch stops first."""
    script = tmp_path / "multi_node.sh"
    script.write_text('# run multi-nodes with pdsh\npdsh -R ssh -w ^hosts "cd /x ; torchrun fastvideo/train_grpo_flux.py"\n')
    done = subprocess.run([sys.executable, "-m", "otca_patch.launch.wrapper", str(script), "--otca"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    assert "through pdsh" in done.stderr and "would train vanilla" in done.stderr
    assert "otca-patch launch --otca -- torchrun" in done.stderr and "OTCA_PATCH_ARGS=" in done.stderr
    comment_only = tmp_path / "local.sh"  # a comment naming pdsh is not a remote launch
    comment_only.write_text("# not pdsh here\ntrue\n")
    done = subprocess.run([sys.executable, "-m", "otca_patch.launch.wrapper", str(comment_only), "--otca"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    # not refused for pdsh, but for what it runs: no targeted trainer (the pre-flight says so before it starts)
    assert "through pdsh" not in done.stderr and "reaches no trainer the layer targets" in done.stderr, done.stderr
