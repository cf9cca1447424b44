"""The ``otca-patch`` entry point, every command's ``--help`` and the built-in credit example."""
import argparse
import re
import subprocess
import sys
from pathlib import Path

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


#: what a user's help must not show: the package's module paths (``python -m otca_patch.smoke`` is a
#: command and stays), the start-up hook's file, and the spec's or the paper's section numbers
INTERNAL_NAMES = re.compile(r"otca_patch[./](?!smoke\b)|\bhooks\.\w|sitecustomize|\bspec (?:section )?\d|"
                            r"\bApp\. [A-Z]|the MGDA reading")


def help_parsers(name: str, monkeypatch, capsys) -> tuple[str, list[argparse.ArgumentParser]]:
    """``otca-patch NAME --help``'s text and every argparse parser whose help it formatted."""
    formatted = []
    original = argparse.ArgumentParser.format_help

    def recording(parser):
        formatted.append(parser)
        return original(parser)

    monkeypatch.setattr(argparse.ArgumentParser, "format_help", recording)
    try:
        code = main([name, "--help"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0
    return capsys.readouterr().out, formatted


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_of_every_command_says_what_it_does(name, monkeypatch, capsys):
    out, parsers = help_parsers(name, monkeypatch, capsys)
    for parser in parsers:
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            said = re.sub(r"\(default: .*?\)", "", action.help or "").strip()
            assert said, f"otca-patch {name}: {'/'.join(action.option_strings) or action.dest} has no description"
    internal = INTERNAL_NAMES.search(out)
    assert internal is None, f"otca-patch {name} --help shows {out[max(internal.start() - 60, 0):internal.end() + 20]!r}"


def test_help_wraps_a_list_of_names_between_names(monkeypatch, capsys):
    from otca_patch.demo.variants import ABLATION_ORDER

    out, _ = help_parsers("ablate", monkeypatch, capsys)
    shown = out[out.index("\n  --modes MODES"):out.index("\n  --seeds SEEDS")]  # the flag's help, not the usage
    listed = re.sub(r"\s+", "", shown[shown.index("(default: ") + len("(default: "):shown.rindex(")")])
    assert listed.split(",") == ["multi_grpo"] + [m for m in ABLATION_ORDER if m != "multi_grpo"]
    broken = [line for line in shown.splitlines() if re.search(r"[a-z0-9_]$", line) and "," in line.split()[-1]]
    assert not broken, f"a mode name is broken across lines: {broken}"


def test_smoke_help_hides_the_test_probe_and_shows_the_layer_flags(capsys):
    try:
        main(["smoke", "--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    assert "--probe" not in out
    for flag in ("--otca ", "--otca_observe", "--otca_rewards", "--otca_mode", "--otca_target"):
        assert flag in out, f"otca-patch smoke --help does not show {flag.strip()}"


def test_help_imports_neither_torch_nor_the_plotting_and_model_libraries():
    """Each ``otca-patch COMMAND --help`` answers without importing torch, matplotlib or diffusers (their
    import costs seconds of CPU); in a fresh interpreter, command after command."""
    probe = ("import contextlib, io, sys\n"
             "from otca_patch.cli import COMMANDS, main\n"
             "for name in COMMANDS:\n"
             "    with contextlib.redirect_stdout(io.StringIO()):\n"
             "        try:\n"
             "            main([name, '--help'])\n"
             "        except SystemExit:\n"
             "            pass\n"
             "    heavy = [m for m in ('torch', 'matplotlib', 'scipy', 'diffusers', 'transformers') if m in sys.modules]\n"
             "    print(name, *heavy)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [row[0] for row in rows] == list(COMMANDS)
    assert [row for row in rows if len(row) > 1] == [], "these commands' --help imported a heavy library"
