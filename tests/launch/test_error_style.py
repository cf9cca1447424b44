"""One error style everywhere: one line, prefixed by the command the user typed
(``otca-patch launch: error: ...``), "did you mean" for a near miss, no usage block, no old script
names; ``launch`` checks the objectives before it starts anything; every ``--help`` documents
``otca-patch COMMAND``."""
import subprocess
import sys

import pytest

from otca_patch.cli import COMMANDS, main
from test_launch import launch, synthetic  # noqa: F401  (synthetic is a fixture)

OLD_NAMES = ("otca_run.sh:", "ab_compare:", "rebase_upstream.sh:")


def one_error_line(stderr: str, prefix: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"{prefix}: error: "), lines[0]
    assert not any(old in lines[0] for old in OLD_NAMES)
    return lines[0]


@pytest.mark.parametrize("flags, expected", [
    (["--otca", "--otca_mode", "otcaa"], "--otca_mode: invalid value 'otcaa'; did you mean otca?"),
    (["--otca", "--otca_mod", "tcd"], "unknown flag --otca_mod; did you mean --otca_mode?"),
    (["--otca", "--otca_rewards", "upstream,clip_tt"],
     "--otca_rewards: 'clip_tt' is neither 'upstream' nor a reward model of the registry; did you mean clip_t?"),
    (["--otca", "--otca_rewards", "upstream,clip_t", "--otca_reward_opt", "clip_t.model_nme=ViT-B-32"],
     "reward model 'clip_t' has no option 'model_nme'"),
    (["--otca", "--otca_rewards", "upstream,clip_t", "--otca_reward_ckpt", "clip=/x.pt"],
     "--otca_reward_ckpt: 'clip' is not a registry objective of --otca_rewards upstream,clip_t; did you mean clip_t?"),
])
def test_launch_refuses_bad_flags_in_one_line_before_anything_starts(synthetic, flags, expected):
    upstream, env = synthetic
    done = launch(upstream, env, "touch started\npython trainer/train.py --out result.json", *flags)
    assert done.returncode == 2
    assert not (upstream / "started").exists(), "nothing may start"
    assert expected in one_error_line(done.stderr, "otca-patch launch")
    assert len(done.stderr) < 300


def test_ab_gives_the_same_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "ab", "--smoke", str(tmp_path), "--otca_mode", "otcaa"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "did you mean otca?" in one_error_line(done.stderr, "otca-patch ab")


def test_run_has_one_prefix_for_a_broken_hook_point(synthetic):
    upstream, env = synthetic
    trainer = upstream / "trainer" / "train.py"
    trainer.write_text(trainer.read_text().replace("return advantages", "return list(advantages)"))
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "run", "trainer/train.py", "--otca"], cwd=upstream,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("otca-patch run: error: cannot install hook 'scale' into upstream file trainer/train.py")
    assert "error: otca-patch" not in done.stderr and done.stderr.count(": error:") == 1


def test_a_launchs_trainer_processes_speak_as_the_launch(synthetic):
    upstream, env = synthetic
    broken = upstream / "trainer" / "train.py"
    broken.write_text(broken.read_text().replace("return advantages", "return list(advantages)"))
    done = launch(upstream, env, 'name=train; python "trainer/${name}.py" --out result.json', "--otca")
    assert done.returncode == 2
    assert "otca-patch launch: error: cannot install hook 'scale'" in done.stderr
    assert "otca-patch: error: otca-patch" not in done.stderr


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_documents_otca_patch_command(name, capsys):
    try:
        code = main([name, "--help"])
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr().out
    assert code == 0
    assert f"otca-patch {name}" in "\n".join(out.splitlines()[:2]), out[:300]
    assert not any(old.rstrip(":") in out.splitlines()[0] for old in OLD_NAMES)
