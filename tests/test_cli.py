"""The ``otca-patch`` entry point and the built-in credit example."""
import pytest

from otca_patch.cli import COMMANDS, main
from otca_patch.credit import CreditConfig, compute_credit
from otca_patch.credit.example import example_batch


def test_usage_and_unknown_command(capsys):
    assert main([]) == 2
    assert "usage: otca-patch COMMAND" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_every_command_module_exists():
    import importlib.util

    for name, (module, _) in COMMANDS.items():
        assert importlib.util.find_spec(module) is not None, f"{name}: {module} is missing"


def test_credit_example_prints_the_engines_numbers(capsys):
    assert main(["credit", "--mode", "otca"]) == 0
    out = capsys.readouterr().out
    rewards, latents, group_ids = example_batch()
    credit = compute_credit(rewards, latents, group_ids, CreditConfig())
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit() and len(line.split()) == 13]
    assert len(rows) == 8
    first = [float(x) for x in rows[0].split()[1:]]
    assert first[:8] == pytest.approx(credit.step_weights[0].tolist(), abs=0.006)
    assert first[8:11] == pytest.approx(credit.mixture[0].tolist(), abs=0.006)
    assert first[11] == pytest.approx(credit.combined[0].item(), abs=0.0006)


def test_credit_example_takes_the_options(capsys):
    assert main(["credit", "--fusion", "group", "--weight_scope", "batch", "--explore_center"]) == 0
    rows = [line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line.strip()[:1].isdigit() and len(line.split()) == 13]
    assert len(rows) == 8
    assert len({tuple(row[:8]) for row in rows}) == 1  # the batch's step schedule for every sample
    for group in (rows[:4], rows[4:]):  # one mixture per group, combined zero-mean in the group
        assert len({tuple(row[8:11]) for row in group}) == 1
        assert sum(float(row[11]) for row in group) == pytest.approx(0, abs=0.003)


def test_credit_example_shows_a_sample_that_trains_and_says_why_others_are_zero(capsys):
    assert main(["credit"]) == 0
    out = capsys.readouterr().out
    rewards, latents, group_ids = example_batch()
    credit = compute_credit(rewards, latents, group_ids, CreditConfig())
    assert (credit.combined == 0).any() and (credit.combined != 0).any(), "the example shows both cases"
    shown = int(credit.combined.abs().argmax())
    line = next(line for line in out.splitlines() if line.startswith("advantage per step"))
    assert line.startswith(f"advantage per step, sample {shown} ")
    printed = [float(x) for x in line.split(":")[1].split()]
    assert printed == pytest.approx(credit.advantages[shown].tolist(), abs=0.006)
    assert min(abs(x) for x in printed) > 0.1
    assert "disagree in sign" in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_is_plain_text_without_restructuredtext_markup(name, capsys):
    try:
        code = main([name, "--help"])
    except SystemExit as exc:  # argparse's --help exits
        code = exc.code
    out = capsys.readouterr().out
    assert code == 0 and f"otca-patch {name}" in out
    assert "``" not in out, f"otca-patch {name} --help shows reStructuredText: {out[out.index('``') - 60:][:120]!r}"
    assert ":func:`" not in out and ":class:`" not in out


def test_plain_text_drops_literals_and_roles_and_keeps_the_words():
    from otca_patch.help_text import plain_text

    assert plain_text("run ``torchrun -m x`` then :func:`main` (`otca-patch launch`)") == \
        "run torchrun -m x then main (`otca-patch launch`)"


def test_a_mistyped_smoke_target_gets_one_line_with_did_you_mean(tmp_path, capsys):
    assert main(["smoke", str(tmp_path), str(tmp_path / "out"), "--target", "dancegrpo-fluxx"]) == 2
    err = capsys.readouterr().err
    assert "did you mean dancegrpo-flux?" in err
    assert "usage:" not in err and len(err.strip().splitlines()) == 1
