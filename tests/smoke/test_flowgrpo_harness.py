"""A FlowGRPO trainer that follows its family is smoke-run from its spec alone: ``[target.smoke]`` names
the family's harness, the tiny model, the sizes and config keys the trainer adds, and the launch its
``main`` needs; the harness runs the spec's ``file``. Bad tables are refused in one line naming the key."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from otca_patch.hooks.spec import PACKAGED_PATCHES_DIR, load_spec, load_specs
from otca_patch.smoke import flowgrpo
from otca_patch.smoke.cli import smoke_module, smoke_targets

#: a FlowGRPO trainer added the way a newcomer would: its spec, with its smoke table, nothing else
NEW_TRAINER = textwrap.dedent('''\
    extends = "flowgrpo/_sde_window.toml"

    [target]
    name = "flowgrpo-flux-newcomer"
    file = "scripts/train_flux_newcomer.py"
    verified_commit = "9745241"
    verified_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

    [target.smoke]
    harness = "flowgrpo"
    model = "flux"
    processes = 2
    sizes = {sde_window_size = 3, sde_window_end = 5, resolution = 64}

    [target.smoke.overrides]
    "sample.sde_window_range" = [0, "{sde_window_end}"]
    "sample.sde_type" = "sde"
    reward_fn = {jpeg_compressibility = "{reward_weight}"}
''')


def newcomer(tmp_path, text=NEW_TRAINER) -> Path:
    """The shipped specs copied, with the newcomer's spec beside them."""
    patches = tmp_path / "patches"
    shutil.copytree(PACKAGED_PATCHES_DIR, patches)
    (patches / "flowgrpo" / "train_flux_newcomer.toml").write_text(text)
    return patches


def test_a_new_trainer_is_a_smoke_target_from_its_spec_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("OTCA_PATCHES_DIR", str(newcomer(tmp_path)))
    spec, smoke = smoke_targets()["flowgrpo-flux-newcomer"]
    assert (smoke.harness, smoke.file) == ("flowgrpo", "scripts/train_flux_newcomer.py")
    # the skeletons' smoke objectives come with it
    assert smoke.objectives == ("jpeg_compressibility", "clip_t")
    run = smoke_module("flowgrpo-flux-newcomer", smoke)
    sizes = run.Sizes()
    # its sizes over the FLUX model's (FlowSizes): new flags, and a default of the family's changed
    assert (sizes.sde_window_size, sizes.sde_window_end, sizes.resolution, sizes.num_steps) == (3, 5, 64, 4)
    trainer = flowgrpo.trainer("flowgrpo-flux-newcomer", smoke)
    keys = trainer.config_keys(run.Sizes(sde_window_end=6, reward_weight=0.5), Path("/data"), Path("/model"))
    assert keys["sample.sde_window_range"] == [0, 6] and keys["sample.sde_type"] == "sde"
    assert keys["reward_fn"] == {"jpeg_compressibility": 0.5}
    assert keys["train.ema"] is False and keys["resolution"] == 64  # the FLUX model's base keys stay under it


def test_a_launch_the_trainer_cannot_run_in_is_refused_saying_how_to_launch(tmp_path, monkeypatch):
    monkeypatch.setenv("OTCA_PATCHES_DIR", str(newcomer(tmp_path)))
    trainer = flowgrpo.trainer("flowgrpo-flux-newcomer", smoke_targets()["flowgrpo-flux-newcomer"][1])
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(SystemExit, match="scripts/train_flux_newcomer.py must be launched on 2 or more processes.*"
                                         "accelerate launch --num_processes 2"):
        trainer.check_launch()
    monkeypatch.setenv("WORLD_SIZE", "2")
    trainer.check_launch()
    qwen = flowgrpo.trainer_named("flowgrpo-qwenimage")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit, match="under torchrun"):
        qwen.check_launch()


@pytest.mark.parametrize("table,message", [
    ('harness = "flowgrpo"\nmodel = "flux"\nprocesses = 0\n', "processes must be a positive integer"),
    ('harness = "flowgrpo"\nmodel = "flux"\nlauncher = "mpirun"\n', "launcher must be one of accelerate, torchrun"),
    ('harness = "flowgrpo"\nmodel = "flux"\nsizes = {rationorm = true}\n', "sizes must map flag names"),
    ('harness = "flowgrpo"\nmodel = "flux"\nstarts_wandb = "no"\n', "starts_wandb must be true or false"),
    ('harness = "flowgrpo"\nmodule = "m"\n', "gives module and harness"),
    ('harness = "flowgrpo"\nframes = 3\n', "[target.smoke] takes"),
])
def test_a_bad_smoke_table_is_refused_naming_the_key(tmp_path, table, message):
    text = NEW_TRAINER.split("[target.smoke]")[0] + "[target.smoke]\n" + table
    with pytest.raises(ValueError, match=f"train_flux_newcomer.toml: .*{message.replace('[', '.').replace(']', '.')}"):
        load_spec(newcomer(tmp_path, text) / "flowgrpo" / "train_flux_newcomer.toml")


@pytest.mark.parametrize("table,message", [
    ('harness = "flowgrpo"\nmodel = "flux2"\n', "model must be one of sd3, flux, .*got 'flux2'"),
    ('harness = "flowgrpo"\nmodel = "flux"\noverrides = {x = "{window}"}\n', "overrides name sizes it does not have: window"),
])
def test_a_model_or_size_the_harness_lacks_is_refused_in_one_line(tmp_path, table, message):
    text = NEW_TRAINER.split("[target.smoke]")[0] + "[target.smoke]\n" + table
    smoke = load_spec(newcomer(tmp_path, text) / "flowgrpo" / "train_flux_newcomer.toml").smoke
    with pytest.raises(ValueError, match=f"target flowgrpo-flux-newcomer: .*{message}"):
        flowgrpo.trainer("flowgrpo-flux-newcomer", smoke)


def test_every_shipped_flowgrpo_trainer_runs_its_own_file_through_the_family_harness():
    flow = [spec for spec in load_specs() if spec.upstream == "flow_grpo" and spec.smoke.runs]
    assert len(flow) >= 9
    for spec in flow:
        assert spec.smoke.harness == "flowgrpo" and spec.smoke.module == "", spec.name
        trainer = flowgrpo.trainer(spec.name, spec.smoke)
        assert trainer.upstream_file == spec.file
        assert {f.name for f in fields(flowgrpo.Sizes)} <= {f.name for f in fields(trainer.sizes)}


def test_the_smoke_flags_of_a_table_trainer_are_its_sizes(tmp_path):
    """``otca-patch smoke --help`` of a table-built target lists the sizes its spec adds, with their defaults."""
    checkout = tmp_path / "flow_grpo"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts" / "train_sd3_fast.py").write_text("")
    result = subprocess.run([sys.executable, "-m", "otca_patch.smoke", str(checkout), str(tmp_path / "out"),
                             "--target", "flowgrpo-sd3-fast", "--help"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OTCA_PATCH_ARGS": ""})
    assert result.returncode == 0, result.stderr
    # each flag's entry: its name and metavar, then its description ending in its default
    entries = {entry.split()[0]: " ".join(entry.split())
               for entry in re.split(r"\n  (?=--)|\n\n", result.stdout) if entry.strip().startswith("--")}
    assert entries["--sde_window_size"].startswith("--sde_window_size SDE_WINDOW_SIZE ")
    assert entries["--sde_window_size"].endswith("(default: 2)") and entries["--num_steps"].endswith("(default: 6)")
    assert entries["--sde_type"].endswith("(default: cps)")
