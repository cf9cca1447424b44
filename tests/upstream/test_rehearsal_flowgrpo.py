"""The FlowGRPO launch rehearsal on upstream's own checkout: each run starts upstream's launch script,
whose copy differs only in its launch line's CPU options, and each rehearsed FlowGRPO trainer rehearses
end to end (three runs, one PASS line)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_snapshots import missing, shared_dir

from otca_patch.rehearsal import flowgrpo, upstreams
from otca_patch.rehearsal.launch_script import launcher_line

pytestmark = pytest.mark.upstream

REPO = Path(__file__).resolve().parents[2]


def checkout_env(flow_grpo: Path, flow_grpo_9745241: Path) -> dict:
    return {"OTCA_UPSTREAM_FLOW_GRPO": str(flow_grpo), "OTCA_UPSTREAM_FLOW_GRPO_9745241": str(flow_grpo_9745241)}


def accelerate_line(config_file: str, processes: list[str], port: str, script: str, *arguments: str) -> list[str]:
    return ["accelerate", "launch", "--config_file", f"scripts/accelerate_configs/{config_file}", *processes,
            "--main_process_port", port, script, *arguments]


#: target -> (upstream's launch script, its line, the rehearsal's line before --config: PORT is any free port)
LINES = {
    "flowgrpo-sd3": ("scripts/single_node/grpo.sh",
                     accelerate_line("multi_gpu.yaml", ["--num_processes=1"], "29501", "scripts/train_sd3.py",
                                     "--config", "config/grpo.py:general_ocr_sd3_1gpu"),
                     accelerate_line("multi_gpu.yaml", ["--num_processes", "2"], "PORT", "scripts/train_sd3.py")),
    "flowgrpo-flux": ("scripts/single_node/grpo_flux.sh",
                      accelerate_line("deepspeed_zero2.yaml", ["--num_processes=8"], "29501", "scripts/train_flux.py",
                                      "--config", "config/grpo.py:pickscore_flux_8gpu"),
                      accelerate_line("multi_gpu.yaml", ["--num_processes", "2"], "PORT", "scripts/train_flux.py")),
}


@pytest.mark.parametrize("target", sorted(LINES))
def test_the_run_starts_upstreams_script_with_only_the_cpu_options_of_its_launch_line_changed(
        target, flow_grpo, flow_grpo_9745241, tmp_path, monkeypatch):
    for name, value in checkout_env(flow_grpo, flow_grpo_9745241).items():
        monkeypatch.setenv(name, value)
    launch_script, upstream_line, expected = LINES[target]
    plan = flowgrpo.plan(target, tmp_path / "work", "cpu")
    run = tmp_path / "run"
    assert plan.command(run) == ["bash", launch_script] and plan.runs_script and plan.script == launch_script
    assert launcher_line(plan.cwd / launch_script, "accelerate") == upstream_line
    original, copy = (plan.cwd / launch_script).read_text(), (plan.where(run) / launch_script).read_text()
    command = launcher_line(plan.where(run) / launch_script, "accelerate")
    assert [line for line in copy.splitlines() if not line.startswith("accelerate ")] == \
        [line for line in original.splitlines() if not line.startswith("accelerate ")]
    port = command.index("--main_process_port") + 1
    assert command[port].isdigit()
    config = run.resolve() / "rehearsal_config.py"
    assert command == [*[command[port] if word == "PORT" else word for word in expected],
                       "--config", f"{config}:{run.resolve() / 'rehearsal_settings.json'}"]
    settings = json.loads((run / "rehearsal_settings.json").read_text())
    assert settings["named"] == upstream_line[-1].split(":")


#: target -> its training DataLoader's workers as upstream's config sets them (Qwen-Image's config: 1)
REHEARSED = {"flowgrpo-sd3": 8, "flowgrpo-flux": 8, "flowgrpo-qwenimage": 1}


@pytest.mark.parametrize("target", sorted(REHEARSED))
def test_each_flowgrpo_trainer_rehearses_end_to_end(flow_grpo, flow_grpo_9745241, tmp_path, target):
    env = {**os.environ, **checkout_env(flow_grpo, flow_grpo_9745241)}
    done = subprocess.run([sys.executable, "-m", "otca_patch.rehearsal", "--out", str(tmp_path), target],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    lines = done.stdout.splitlines()
    script = {"flowgrpo-sd3": "grpo.sh", "flowgrpo-flux": "grpo_flux.sh", "flowgrpo-qwenimage": "grpo_qwenimage.sh"}
    assert f"PASS {target} ranks=2 dataloader_workers={REHEARSED[target]} steps=3 checkpoint=yes " \
           f"script=scripts/single_node/{script[target]} setup=0 vanilla=identical credit=reference" in lines, \
        done.stdout + done.stderr[-4000:]
    assert re.match(r"launch rehearsal: passed \(1 targets\) in \d+ s", lines[-1]), lines[-1]
    assert done.returncode == 0


def test_sd3_rehearses_the_newer_snapshot_where_the_pinned_one_is_absent(tmp_path, monkeypatch):
    """The GPU check's payload carries one FlowGRPO snapshot, 9745241 (the SD3 spec holds there too)."""
    archive = shared_dir() / "upstream" / "flow_grpo-9745241.tar.gz"
    if not archive.is_file():
        missing(f"no {archive}")
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / archive.name).symlink_to(archive)
    monkeypatch.setenv("OTCA_SHARED", str(tmp_path))
    monkeypatch.setattr(upstreams, "REPO", tmp_path)  # no .gpu-payload of this checkout holds the pinned one
    for variable in ("OTCA_UPSTREAM_FLOW_GRPO", "OTCA_UPSTREAM_FLOW_GRPO_9745241"):
        monkeypatch.delenv(variable, raising=False)
    assert not any(place.is_file() for place in upstreams.snapshot_places("flow_grpo-ac4c86e.tar.gz"))
    commit, found = flowgrpo.first_checkout(flowgrpo.TARGET_BUILDERS["flowgrpo-sd3"]().commits, "scripts/train_sd3.py")
    assert commit == "9745241"
    assert (found / "scripts" / "train_flux.py").is_file()  # a file only the newer commit has
