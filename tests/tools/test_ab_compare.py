"""scripts/ab_compare.sh on a synthetic upstream: two sides, private outputs, one report."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otca_patch.ab.cli import side_argv
from otca_patch.ab.workdir import make_working_copy, output_dirs_of
from sample_grid_checks import check_ab_samples

REPO = Path(__file__).resolve().parents[2]

# writes what DanceGRPO writes: ./reward.txt (one mean per step), ./images/, checkpoints in --output_dir
TRAINER = textwrap.dedent('''\
    import os, sys

    def rewards_for(step):
        rewards = [[0.1 * step, 1.0 - 0.1 * step], [0.3 * step, 1.0 + 0.1 * step]]
        return rewards

    if __name__ == "__main__":
        out = sys.argv[sys.argv.index("--output_dir") + 1]
        os.makedirs(out, exist_ok=True)
        os.makedirs("images", exist_ok=True)
        for step in range(1, 5):
            rewards = rewards_for(step)
            with open("reward.txt", "a") as handle:
                handle.write(f"{sum(r[0] for r in rewards) / len(rewards)}\\n")
            open(f"images/flux_0_{step}.png", "w").close()
        with open(os.path.join(out, "checkpoint-4-0"), "w") as handle:
            handle.write("weights")
''')

SPEC = textwrap.dedent('''\
    [target]
    name = "synthetic-trainer"
    upstream = "Synthetic"
    file = "trainer/train.py"
    runtime = "synthetic_ab_runtime:Runtime"
    outputs = ["images", "reward.txt"]  # what the trainer writes into its working directory: each A/B side gets its own
    verified_commit = "0000000000000000000000000000000000000000"
    verified_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

    [[hooks]]
    name = "log_rewards"
    function = "rewards_for"
    anchor = "return rewards"
    action = "replace"
    code = "return __otca__.log(step, rewards)"
    reads = ["step", "rewards"]
''')

# observe logs and leaves the rewards alone; --otca "trains better": doubles the first objective.
# Each step's two samples are grey images as bright as 0.1 * step (OTCA's second one brighter after
# the first step), kept as a real runtime keeps them.
RUNTIME = textwrap.dedent('''\
    import torch
    from otca_patch.runlog import RunLog
    from otca_patch.samples import SampleKeeper

    class Runtime:
        def __init__(self, config, spec):
            self.config, self.log_file = config, RunLog(config.otca_log_dir)
            self.keeper = SampleKeeper(config.otca_log_dir)
        def describe(self):
            return "synthetic"
        def log(self, step, rewards):
            images = torch.full((2, 3, 16, 16), 0.1 * step)
            if self.config.otca:
                rewards = [[2 * r[0], r[1]] for r in rewards]
                images[1] += 0.05 * (step - 1)
            self.keeper.add(images, ["a cat", "a dog"])
            self.keeper.end_step(step)
            self.log_file.write({"step": step, "rank": 0, "world_size": 1, "mode": self.config.otca_mode,
                                 "observe": self.config.otca_observe, "objectives": ["upstream", "clip_t"],
                                 "rewards": rewards, "step_weights": [[1.0, 0.5, 1.5]] * 2,
                                 "mixture": [[0.5, 0.5]] * 2})
            return rewards
''')

LAUNCH = textwrap.dedent('''\
    mkdir images
    python trainer/train.py --seed 42 \\
        --output_dir data/outputs/grpo
''')


@pytest.fixture()
def synthetic(tmp_path):
    upstream = tmp_path / "upstream"
    (upstream / "trainer").mkdir(parents=True)
    (upstream / "trainer" / "train.py").write_text(TRAINER)
    (upstream / "data" / "flux").mkdir(parents=True)
    (upstream / "data" / "flux" / "model.bin").write_text("base")
    (upstream / "launch.sh").write_text(LAUNCH)
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "synthetic.toml").write_text(SPEC)
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "synthetic_ab_runtime.py").write_text(RUNTIME)
    env = dict(os.environ, OTCA_PATCHES_DIR=str(tmp_path / "patches"), OTCA_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(tmp_path / "runtime"), str(REPO)]),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("OTCA_PATCH_ARGS", None)
    return upstream, env


def test_output_dirs_are_read_across_continued_lines(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("torchrun a.py \\\n  --seed 1 \\\n  --output_dir data/outputs/grpo \\\n  --x 1\n"
                      "# --output_dir commented/out\npython b.py --output_dir=other\n")
    assert output_dirs_of(script) == ["data/outputs/grpo", "other"]


def test_working_copy_shares_inputs_and_keeps_outputs_private(synthetic, tmp_path):
    upstream, _ = synthetic
    work = tmp_path / "side"
    make_working_copy(upstream, work, ["images", "reward.txt", "data/outputs/grpo"])
    assert (work / "trainer").is_symlink() and (work / "data" / "flux").is_symlink()
    assert not (work / "data").is_symlink()  # real, so data/outputs/grpo can be private
    assert not (work / "images").exists() and not (work / "data" / "outputs" / "grpo").exists()
    with pytest.raises(ValueError, match="outside the checkout"):
        make_working_copy(upstream, tmp_path / "other", ["../escape"])
    with pytest.raises(ValueError, match="absolute or built at run time"):
        make_working_copy(upstream, tmp_path / "other", ["$OUT/ckpt"])


def test_the_sides_differ_only_in_the_switch():
    flags = ["--steps", "3", "--otca", "--otca_mode", "tcd", "--otca_rewards", "upstream,clip_t"]
    assert side_argv(flags, "--otca_observe") == ["--steps", "3", "--otca_mode", "tcd", "--otca_rewards",
                                                  "upstream,clip_t", "--otca_observe"]
    assert side_argv(flags[:2] + flags[3:], "--otca")[-1] == "--otca"


def test_ab_compare_runs_both_sides_apart_and_reports(synthetic, tmp_path):
    upstream, env = synthetic
    out = tmp_path / "ab"
    command = [str(REPO / "scripts" / "ab_compare.sh"), "--out", str(out), "launch.sh", "--otca_mode", "otca"]
    done = subprocess.run(command, cwd=upstream, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for side in ("vanilla", "otca"):
        assert len((out / side / "reward.txt").read_text().splitlines()) == 4, side
        assert (out / side / "data" / "outputs" / "grpo" / "checkpoint-4-0").read_text() == "weights"
        assert len(list((out / side / "images").iterdir())) == 4
    # the checkout itself got nothing
    assert sorted(p.name for p in upstream.iterdir()) == ["data", "launch.sh", "trainer"]
    assert sorted(p.name for p in (upstream / "data").iterdir()) == ["flux"]
    # upstream's reward.txt: vanilla means 0.2 t, OTCA's doubled first objective 0.4 t
    assert float((out / "vanilla" / "reward.txt").read_text().split()[-1]) == pytest.approx(0.8)
    assert float((out / "otca" / "reward.txt").read_text().split()[-1]) == pytest.approx(1.6)
    report = (out / "compare" / "report.md").read_text()
    assert "| vanilla | vanilla, observed" in report and "| otca | OTCA, mode otca" in report
    assert (out / "compare" / "step_weights_otca.png").is_file()
    assert not (out / "compare" / "step_weights_vanilla.png").exists()
    assert report.splitlines()[2] == "![samples](samples.png)"  # the samples open the report
    check_ab_samples(out, columns=2, last_differs=[False, True])
    # a second A/B into the same folder is refused, the first is kept
    again = subprocess.run(command, cwd=upstream, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert len((out / "otca" / "reward.txt").read_text().splitlines()) == 4


def test_unknown_otca_flag_stops_before_any_side_runs(synthetic, tmp_path):
    upstream, env = synthetic
    command = [str(REPO / "scripts" / "ab_compare.sh"), "--out", str(tmp_path / "ab"), "launch.sh", "--otca_mdoe", "x"]
    done = subprocess.run(command, cwd=upstream, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown flag --otca_mdoe" in done.stderr
    assert not (tmp_path / "ab").exists()


def test_seeds_run_each_side_once_per_seed_and_the_report_counts_them(synthetic, tmp_path):
    upstream, env = synthetic
    trainer = upstream / "trainer" / "train.py"
    # rewards shift with the seed, so the seeds are distinguishable runs
    trainer.write_text(TRAINER.replace("rewards = [[0.1 * step,",
                                       "seed = int(sys.argv[sys.argv.index('--seed') + 1])\n"
                                       "    rewards = [[0.1 * step + 0.01 * seed,"))
    out = tmp_path / "ab"
    command = [str(REPO / "scripts" / "ab_compare.sh"), "--out", str(out), "--seeds", "1,2,3", "launch.sh"]
    refused = subprocess.run(command, cwd=upstream, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "does not read $OTCA_AB_SEED" in refused.stderr and not out.exists()
    (upstream / "launch.sh").write_text(LAUNCH.replace("--seed 42", "--seed ${OTCA_AB_SEED:-42}"))
    done = subprocess.run(command, cwd=upstream, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    for side in ("vanilla", "otca"):
        for seed in (1, 2, 3):
            first = float((out / side / f"seed{seed}" / "reward.txt").read_text().split()[0])
            # reward.txt: the mean over two samples of the first objective (doubled by the otca side)
            assert first == pytest.approx((2 if side == "otca" else 1) * (0.2 + 0.005 * seed)), (side, seed)
    report = (out / "compare" / "report.md").read_text()
    assert "| vanilla (3 runs) | otca (3 runs) |" in report and "3 seeds on each side, paired by seed" in report
    assert "![samples](samples.png)" in report and "(each side's first seed)" in report
    assert (out / "compare" / "samples.png").is_file()
    for flag in ("1", "1,1", "a,b"):
        bad = subprocess.run(command[:4] + [flag, "launch.sh"], cwd=upstream, env=env, capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 2 and "--seeds" in bad.stderr
