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

REPO = Path(__file__).resolve().parents[1]

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
    runtime = "synthetic_runtime"
    verified_commit = "0000000000000000000000000000000000000000"
    verified_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

    [[hooks]]
    name = "scale"
    function = "advantages_for"
    anchor = "return advantages"
    action = "replace"
    code = "return __otca__.scale(advantages)"
''')

RUNTIME = textwrap.dedent('''\
    from otca_patch.targets.descriptor import Target

    class Runtime:
        def __init__(self, config):
            self.factor = 2.0 if config.otca_mode == "otca" else 3.0
        def describe(self):
            return "synthetic"
        def scale(self, values):
            return [self.factor * v for v in values]

    TARGET = Target("synthetic-trainer", Runtime)
''')


@pytest.fixture()
def synthetic(tmp_path):
    upstream = tmp_path / "upstream"
    (upstream / "trainer").mkdir(parents=True)
    (upstream / "trainer" / "train.py").write_text(TRAINER)
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "synthetic.toml").write_text(SPEC)
    runtime_dir = tmp_path / "runtime"
    runtime_dir.mkdir()
    (runtime_dir / "synthetic_runtime.py").write_text(RUNTIME)
    env = dict(os.environ, OTCA_PATCHES_DIR=str(patches), OTCA_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(runtime_dir), str(REPO)]), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("OTCA_PATCH_ARGS", None)
    return upstream, env


def launch(upstream: Path, env: dict, launcher_line: str, *flags: str) -> subprocess.CompletedProcess:
    script = upstream / "launch.sh"
    script.write_text(f"set -e\n{launcher_line}\n")  # fixed arguments, no "$@", as upstream's scripts
    return subprocess.run([str(REPO / "scripts" / "otca_run.sh"), str(script), *flags], cwd=upstream, env=env,
                          capture_output=True, text=True, timeout=300)


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
    line = "torchrun --nproc_per_node 2 --master_port 29631 trainer/train.py --out result.json"
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
    trainer = upstream / "trainer" / "train.py"
    trainer.write_text(trainer.read_text().replace("return advantages", "return list(advantages)"))
    done = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "FAIL: anchor not found, expected exactly 1" in done.stdout and "0 of 1 hook points hold" in done.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(doctor[:-1] + [str(empty)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds none of the files" in done.stderr
