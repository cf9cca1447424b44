"""Upstream's launch script run as it is on a machine without network (``otca_patch.rehearsal.verbatim``
and ``served``): only the launch command and the named exports change, and its set-up lines run
against shims that record sudo / apt-get, clone a served repository and pip-install from a local
wheelhouse into the run's own environment."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from otca_patch.rehearsal import served
from otca_patch.rehearsal.launch_script import launcher_line
from otca_patch.rehearsal.verbatim import (HPSV2_URL, Served, adapted_script, served_hpsv2, setup_record)
from otca_patch.rehearsal.wheelhouse import wheelhouse

SCRIPT = """export WANDB_DISABLED=true
export WANDB_MODE=online

mkdir images
sudo apt-get update
yes | sudo apt-get install python3-tk

git clone https://github.com/tgxs002/HPSv2.git
cd HPSv2
pip install -e . 
cd ..

###Please adapt the torchrun scripts into your own environment
torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 --master_addr=192.168.0.101 --master_port=29500 \\
    fastvideo/train.py \\
    --seed 42 \\
    --h 720 \\"""


def test_only_the_launch_command_and_the_named_exports_change():
    words = ["torchrun", "--nnodes=1", "--nproc_per_node=2", "fastvideo/train.py", "--seed", "42", "--h", "32"]
    adapted = adapted_script(SCRIPT, "torchrun", words, {"WANDB_MODE": "disabled"})
    before, after = SCRIPT.splitlines(), adapted.splitlines()
    launch = next(i for i, line in enumerate(before) if line.startswith("torchrun"))
    assert after[:launch] == [line.replace("WANDB_MODE=online", "WANDB_MODE=disabled") for line in before[:launch]]
    assert before[1] == "export WANDB_MODE=online" and after[1] == "export WANDB_MODE=disabled"
    assert after[launch:] == ["torchrun --nnodes=1 --nproc_per_node=2 fastvideo/train.py --seed 42 --h 32"]


def test_the_adapted_launch_line_reads_back_as_the_words_given(tmp_path):
    words = ["accelerate", "launch", "--config_file", "a b.yaml", "train.py", "--config", "x.py:y"]
    script = tmp_path / "grpo.sh"
    script.write_text(adapted_script("# 1 GPU\naccelerate launch --num_processes=1 train.py --config c:n\n",
                                     "accelerate", words))
    assert launcher_line(script, "accelerate") == words
    assert script.read_text().startswith("# 1 GPU\n")


def test_an_export_the_script_lacks_is_an_error():
    with pytest.raises(ValueError, match="sets no `export WANDB_PROJECT=`"):
        adapted_script(SCRIPT, "torchrun", ["torchrun"], {"WANDB_PROJECT": "x"})


def test_the_wheelhouse_is_built_once_per_content():
    first = wheelhouse()
    wheels = sorted(first.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == [n for n in ("setuptools", "wheel")
                                                       if served.installed_version(n)]
    stamp = [w.stat().st_mtime_ns for w in wheels]
    assert wheelhouse() == first
    assert [w.stat().st_mtime_ns for w in sorted(first.glob("*.whl"))] == stamp


def run_script(text: str, work: Path, run: Path) -> subprocess.CompletedProcess:
    serving = Served.build(work, {HPSV2_URL: served_hpsv2(work / "served" / "HPSv2")})
    run.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **serving.run_env(run)}
    return subprocess.run(["bash", "-c", text], cwd=run, env=env, capture_output=True, text=True, timeout=600)


def hpsv2_here() -> str:
    return subprocess.run([sys.executable, "-c", "import hpsv2; print(hpsv2.__file__)"], capture_output=True,
                          text=True, check=True).stdout


def test_the_set_up_lines_run_served_and_install_into_the_runs_own_environment(tmp_path):
    before = hpsv2_here()
    set_up = SCRIPT[:SCRIPT.index("###")]
    probe = ("python -c 'import importlib.metadata as m, sys; d = m.distribution(\"hpsv2\"); "
             "print(sys.prefix); print(d.read_text(\"direct_url.json\"))'")
    done = run_script(set_up + probe, tmp_path / "work", tmp_path / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(ran.status, ran.command) for ran in setup_record(tmp_path / "run")] == [
        (0, "sudo apt-get update"), (0, "sudo apt-get install python3-tk"), (0, f"git clone {HPSV2_URL}"),
        (0, "pip install -e .")]
    prefix, direct_url = done.stdout.splitlines()[-2:]
    assert prefix == str(tmp_path / "run" / "env")
    assert '"editable": true' in direct_url and str(tmp_path / "run" / "HPSv2") in direct_url
    assert (tmp_path / "run" / "HPSv2" / "hpsv2" / "src" / "open_clip").is_dir()
    assert (tmp_path / "run" / "images").is_dir()
    assert hpsv2_here() == before  # this environment's hpsv2 is untouched


@pytest.mark.parametrize("word, asked, note", [
    ("packaging", "packaging", ""),
    ("packaging==0.0.1", "packaging", "packaging==0.0.1 -> this environment's packaging "),
    ("otca-no-such-package==1.0", None, "otca-no-such-package==1.0: not installed here and not served"),
])
def test_a_named_requirement_is_served_from_this_environment(word, asked, note):
    served_as, said = served.served_requirement(word)
    assert served_as == asked
    assert said.startswith(note)


def test_pip_outside_a_run_environment_and_an_unserved_clone_are_refused(tmp_path, monkeypatch):
    record = tmp_path / "record.txt"
    monkeypatch.setenv(served.RECORD_VARIABLE, str(record))
    monkeypatch.setenv(served.SERVED_VARIABLE, "{}")
    monkeypatch.chdir(tmp_path)
    assert served.main(["pip", "install", "packaging"]) == 1
    assert served.main(["git", "clone", "https://example.com/x.git"]) == 128
    assert not (tmp_path / "x").exists()
    rows = [line.split("\t") for line in record.read_text().splitlines()]
    assert rows[0][:2] == ["1", "pip install packaging"] and "is no rehearsal run's own environment" in rows[0][2]
    assert rows[1][:3] == ["128", "git clone https://example.com/x.git", "https://example.com/x.git is not served here "
                                                                          "(no network)"]
    assert all(float(row[3]) >= 0 for row in rows)
