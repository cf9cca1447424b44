"""A copy of a targeted trainer left beside the original while the original runs: ``ab``, ``smoke``
and ``launch`` say so in one line with the ``--otca_target`` that would run the copy
(``otca_patch.hooks.copies``). On a synthetic checkout: a trainer, a spec pointing at it."""
import os
from dataclasses import replace
from pathlib import Path

import pytest

from otca_patch import env_names
from otca_patch.ab import cli as ab_cli
from otca_patch.hooks.copies import unused_copies_note
from otca_patch.hooks.spec import Smoke, load_specs
from otca_patch.smoke import cli as smoke_cli

TRAINER = "fastvideo/train_grpo_flux.py"
MINE = "fastvideo/train_grpo_flux_mine.py"
#: a trainer of many distinct lines: a copy shares most of them, an unrelated script almost none
TRAINER_TEXT = "".join(f"value_{i} = compute(step={i}, scale={i * 3})\n" for i in range(40))


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    root = tmp_path / "DanceGRPO"
    (root / "fastvideo").mkdir(parents=True)
    (root / TRAINER).write_text(TRAINER_TEXT)
    monkeypatch.setenv(env_names.COPY_NOTE_SAID, "")  # set, then removed: restored after the test (ab sets it)
    monkeypatch.delenv(env_names.COPY_NOTE_SAID)
    return root


@pytest.fixture
def flux():
    return next(spec for spec in load_specs() if spec.name == "dancegrpo-flux")


def test_a_copy_beside_the_running_trainer_is_named_with_the_flag_that_runs_it(checkout, flux):
    edited = TRAINER_TEXT.splitlines(keepends=True)
    edited[:4] = [line.replace("compute", "my_compute") for line in edited[:4]]  # 36 of the 40 lines kept
    (checkout / MINE).write_text("print('my variant')\n" + "".join(edited))
    note = unused_copies_note(checkout, [flux], [flux])
    assert note is not None and "\n" not in note
    assert note.startswith(f"warning: {MINE} is a copy of {TRAINER} (90% of its lines), but {TRAINER} is what runs")
    assert note.endswith(f"add --otca_target dancegrpo-flux={MINE}")


@pytest.mark.parametrize("chosen", [MINE, "ABSOLUTE"])
def test_no_note_when_otca_target_runs_the_copy(checkout, flux, chosen):
    (checkout / MINE).write_text(TRAINER_TEXT)
    named = str(checkout / MINE) if chosen == "ABSOLUTE" else MINE
    assert unused_copies_note(checkout, [flux], [flux], [named]) is None


def test_no_note_for_unrelated_scripts_or_another_specs_trainer(checkout, flux):
    (checkout / "fastvideo" / "utils.py").write_text("import os\nvalue_1 = compute(step=1, scale=3)\n")
    (checkout / "fastvideo" / "train_grpo_flux_lora.py").write_text(TRAINER_TEXT)  # its own spec runs it
    lora = replace(flux, name="dancegrpo-flux-lora", file="fastvideo/train_grpo_flux_lora.py")
    assert unused_copies_note(checkout, [flux], [flux, lora]) is None


def test_no_note_once_ab_has_said_it(checkout, flux, monkeypatch):
    (checkout / MINE).write_text(TRAINER_TEXT)
    monkeypatch.setenv(env_names.COPY_NOTE_SAID, "1")
    assert unused_copies_note(checkout, [flux], [flux]) is None


@pytest.fixture
def smoke_of_flux(monkeypatch, flux, checkout):
    """``otca-patch smoke`` with one target, the FLUX spec on the synthetic checkout, whose run does nothing."""
    monkeypatch.setattr(smoke_cli, "smoke_targets", lambda: {"dancegrpo-flux": (flux, Smoke(module="x"))})
    monkeypatch.setattr(smoke_cli, "smoke_module", lambda name, smoke: ab_stand_in())
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.chdir(checkout)


def ab_stand_in():
    from dataclasses import dataclass
    from types import SimpleNamespace

    @dataclass
    class Sizes:
        steps: int = 1

    return SimpleNamespace(Sizes=Sizes, run=lambda *args, **kwargs: {})


def test_smoke_warns_in_one_line_when_the_original_runs_beside_a_copy(smoke_of_flux, checkout, capsys):
    (checkout / MINE).write_text(TRAINER_TEXT)
    assert smoke_cli.main([".", "out"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"otca-patch smoke: warning: {MINE} is a copy of {TRAINER} (100% of its lines), but {TRAINER} "
                        f"is what runs: to run the copy add --otca_target dancegrpo-flux={MINE}"]


def test_smoke_says_it_runs_the_named_copy_vanilla_without_otca(smoke_of_flux, checkout, capsys):
    (checkout / MINE).write_text(TRAINER_TEXT)
    assert smoke_cli.main([".", "out", "--otca_target", f"dancegrpo-flux={MINE}"]) == 0
    err = capsys.readouterr().err
    assert f"--otca_target without --otca: running your copy {MINE} vanilla" in err
    assert "warning" not in err


def test_smoke_target_given_a_file_suggests_otca_target(smoke_of_flux, checkout, capsys):
    (checkout / MINE).write_text(TRAINER_TEXT)
    assert smoke_cli.main([".", "out", "--target", MINE]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("otca-patch smoke: error: --target takes a smoke target's name, not a file")
    assert "--otca_target" in err and "\n" not in err and "choose from" not in err


def test_ab_warns_once_before_the_sides_and_the_sides_do_not_repeat_it(smoke_of_flux, checkout, capsys, monkeypatch):
    (checkout / MINE).write_text(TRAINER_TEXT)
    seen = []
    monkeypatch.setattr(ab_cli, "run_sides", lambda *args: seen.append(os.environ.get(env_names.COPY_NOTE_SAID)) or 1)
    assert ab_cli.main(["--out", str(checkout.parent / "ab"), "--smoke", ".", "--steps", "6"]) == 1
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"otca-patch ab: warning: {MINE} is a copy of {TRAINER}")
    assert seen == ["1"], "the sides inherit that it was said"
