"""``otca-patch smoke``'s own behaviour around a run: its last line is the verdict (``smoke: passed`` or
``smoke: failed``) with where the outputs and the run log are, printed from the folder the command was
started in. The smoke modules here are stand-ins (the real ones run upstream's step: tests/upstream/)."""
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from otca_patch.cli import main
from otca_patch.hooks.spec import Smoke
from otca_patch.runlog import LOG_NAME
from otca_patch.smoke import cli as smoke_cli
from upstream_snapshots import missing


@dataclass
class Sizes:
    steps: int = 1


def stand_in(outcome: str):
    """A smoke module whose run writes a run log (as the real ones do under --otca), then ends as ``outcome``."""

    def run(upstream_dir, out_dir, config, sizes, reward_root, probe=None):
        out_dir.mkdir(parents=True, exist_ok=True)
        if config.active:
            (out_dir / LOG_NAME).write_text("{}\n")
        if outcome == "error":
            raise ValueError("the upstream step went wrong")
        if outcome == "crash":
            raise RuntimeError("an unexpected failure")
        return {}

    return SimpleNamespace(Sizes=Sizes, run=run)


@pytest.fixture
def one_target(monkeypatch, tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "train.py").write_text("")
    monkeypatch.setattr(smoke_cli, "smoke_targets", lambda: {"stand-in": (None, Smoke(module="x", objectives=("upstream",)))})
    monkeypatch.chdir(tmp_path)
    for name in ("OTCA_STARTED_IN", "OTCA_PATCH_ARGS", "RANK"):  # set then removed: restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return checkout


def last_line(captured) -> str:
    return (captured.out + captured.err).strip().splitlines()[-1]


def test_a_run_that_passes_ends_with_smoke_passed_and_where_its_outputs_and_run_log_are(one_target, monkeypatch, capsys):
    monkeypatch.setattr(smoke_cli, "smoke_module", lambda name, smoke: stand_in("pass"))
    assert main(["smoke", "checkout", "out", "--target", "stand-in", "--otca"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("smoke: passed")
    assert line.endswith(f"outputs in out, run log out/{LOG_NAME}")  # from where the command was typed


@pytest.mark.parametrize("outcome, status", [("error", 2), ("crash", 1)])
def test_a_run_that_fails_ends_with_smoke_failed_after_the_error(one_target, monkeypatch, capsys, outcome, status):
    monkeypatch.setattr(smoke_cli, "smoke_module", lambda name, smoke: stand_in(outcome))
    assert main(["smoke", "checkout", "out", "--target", "stand-in"]) == status
    captured = capsys.readouterr()
    assert last_line(captured).startswith("smoke: failed")
    assert "outputs in out" in last_line(captured)
    assert ("the upstream step went wrong" if outcome == "error" else "RuntimeError: an unexpected failure") in captured.err


def test_paths_are_shown_from_the_folder_the_command_started_in_even_after_the_run_moved(tmp_path, monkeypatch):
    from otca_patch.env_names import STARTED_IN
    from otca_patch.files import shown_path

    monkeypatch.setenv(STARTED_IN, str(tmp_path))
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")  # a smoke run works inside its output folder
    assert shown_path(tmp_path / "patches" / "x.toml") == "patches/x.toml"
    assert shown_path("/elsewhere/x.toml") == "/elsewhere/x.toml"  # outside: absolute, never ../../..


def test_the_qwen_image_smoke_without_a_qwen_transformers_says_the_command_that_installs_one(
        one_target, monkeypatch, tmp_path, capsys):
    from otca_patch.stand_ins import qwen_transformers

    if qwen_transformers.environment_has_qwen():
        missing("this environment's transformers has Qwen2.5-VL: nothing to refuse")
    monkeypatch.setenv(qwen_transformers.FOLDER_VARIABLE, str(tmp_path / "none"))
    module = SimpleNamespace(Sizes=Sizes, run=stand_in("pass").run, before_imports=qwen_transformers.use)
    monkeypatch.setattr(smoke_cli, "smoke_module", lambda name, smoke: module)
    assert main(["smoke", "checkout", "out", "--target", "stand-in"]) == 2
    captured = capsys.readouterr()
    error = next(line for line in captured.err.splitlines() if "Qwen2.5-VL" in line)
    assert f"{sys.executable} -m pip install --no-deps --target {tmp_path / 'none'} transformers==" in error
    assert last_line(captured).startswith("smoke: failed")
