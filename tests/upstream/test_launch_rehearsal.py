"""The launch rehearsal of DanceGRPO's and MixGRPO's trainers, end to end (``pytest -m upstream``):
upstream's own launch script run as it is, set-up lines included (MixGRPO: its torchrun line, after
its README's set-up line), 2 processes, its DataLoader workers, run with no wrapper, under
``otca-patch launch`` and under ``--otca``; each line must be PASS with every field."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.upstream

#: what upstream's HunyuanVideo train_one_step prints on rank 0 per sample trained on
HUNYUAN_REWARD = re.compile(r"^vq/mq reward (\S+) (\S+)$", re.M)


def rehearse(target: str, checkout: dict[str, str], out: Path) -> dict[str, str]:
    """The fields of ``target``'s PASS line (the test fails on a FAIL line or a failed rehearsal);
    ``checkout``: the variable naming the upstream checkout, and its path."""
    done = subprocess.run([sys.executable, "-m", "otca_patch.rehearsal", "--out", str(out), target],
                          cwd=REPO, env={**os.environ, **checkout},
                          capture_output=True, text=True, timeout=3600)
    found = re.search(rf"^(PASS|FAIL) {target} (.*)$", done.stdout, re.M)
    assert found, done.stdout + done.stderr[-3000:]
    assert found.group(1) == "PASS", found.group(0)
    assert done.returncode == 0
    assert "launch rehearsal: passed (1 targets)" in done.stdout
    replaced = (out / target / "replacements.txt").read_text()
    assert "dist.init_process_group('nccl') -> gloo" in replaced
    return dict(part.split("=", 1) for part in found.group(2).split())


def set_up_ran(out: Path, target: str) -> list[list[str]]:
    """[exit status, command] of each set-up command the --otca run ran (the same in every run: the line checks)."""
    return [line.split("\t")[:2] for line in (out / target / "otca" / "setup_commands.txt").read_text().splitlines()]


def test_dancegrpo_flux_rehearses_end_to_end(dancegrpo, tmp_path):
    fields = rehearse("dancegrpo-flux", {"OTCA_UPSTREAM_DANCEGRPO": str(dancegrpo)}, tmp_path)
    assert fields == {"ranks": "2", "dataloader_workers": "4", "steps": fields["steps"], "checkpoint": "yes",
                      "script": "scripts/finetune/finetune_flux_grpo.sh", "setup": "4",
                      "vanilla": "identical", "credit": "reference"}
    assert int(fields["steps"]) >= 3
    assert set_up_ran(tmp_path, "dancegrpo-flux") == [
        ["0", "sudo apt-get update"], ["0", "sudo apt-get install python3-tk"],
        ["0", "git clone https://github.com/tgxs002/HPSv2.git"], ["0", "pip install -e ."]]


def test_dancegrpo_hunyuan_rehearses_end_to_end(dancegrpo, tmp_path):
    fields = rehearse("dancegrpo-hunyuan", {"OTCA_UPSTREAM_DANCEGRPO": str(dancegrpo)}, tmp_path)
    # upstream's best-of-8 over 4 accumulation steps: 2 optimizer steps per training step, 2 training steps
    assert fields == {"ranks": "2", "dataloader_workers": "4", "steps": "4", "checkpoint": "yes",
                      "script": "scripts/finetune/finetune_hunyuan_grpo.sh", "setup": "6",
                      "vanilla": "identical", "credit": "reference"}
    assert [command for _status, command in set_up_ran(tmp_path, "dancegrpo-hunyuan")] == [
        "pip3 install moviepy", "pip3 install huggingface_hub==0.24.0", "pip3 install tf-keras==2.19.0",
        "pip3 install trl==0.16.0", "pip3 install transformers==4.46.1", "pip3 install protobuf==5.29.5"]
    # upstream records -1 for VQ and MQ when its VideoAlign call raises, and trains on
    for run in ("unwrapped", "wrapped", "otca"):
        printed = (tmp_path / "dancegrpo-hunyuan" / run / "stdout.log").read_text(errors="replace")
        rewards = [(float(vq), float(mq)) for vq, mq in HUNYUAN_REWARD.findall(printed)]
        assert len(rewards) == 16, run  # 8 selected samples per training step
        assert all(pair != (-1.0, -1.0) for pair in rewards), f"{run}: VideoAlign's call failed inside upstream"
    replaced = (tmp_path / "dancegrpo-hunyuan" / "replacements.txt").read_text()
    assert "VideoVLMRewardInference" in replaced and "flash_attn_no_pad" in replaced


def test_mixgrpo_flux_rehearses_end_to_end(mixgrpo, tmp_path):
    """MixGRPO's ``main`` never ends by itself: the launch is stopped once 2 training steps and the
    checkpoint are done."""
    fields = rehearse("mixgrpo-flux", {"OTCA_UPSTREAM_MIXGRPO": str(mixgrpo)}, tmp_path)
    # upstream's launch line: 2 training steps, each 4 optimizer steps (its gradient accumulation)
    assert fields == {"ranks": "2", "dataloader_workers": "4", "steps": "8", "checkpoint": "yes",
                      "script": "scripts/finetune/finetune_flux_grpo_MixGRPO.sh:torchrun", "setup": "1",
                      "vanilla": "identical", "credit": "reference"}
    assert set_up_ran(tmp_path, "mixgrpo-flux") == [["0", "git clone https://github.com/tgxs002/HPSv2.git"]]
    replaced = (tmp_path / "mixgrpo-flux" / "replacements.txt").read_text()
    assert "stopped (SIGTERM) once 2 training steps and the checkpoint are done" in replaced


def test_every_rehearsal_target_is_rehearsed_by_a_test_here():
    """CI's launch rehearsal is these tests: a target added to the rehearsal needs its test beside them."""
    from otca_patch.rehearsal.__main__ import families

    tests = "".join(path.read_text() for path in Path(__file__).parent.glob("test_*rehears*.py"))
    assert [target for target in families() if f'"{target}"' not in tests] == []
