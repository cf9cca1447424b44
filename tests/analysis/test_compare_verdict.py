"""`otca-patch compare`'s verdict: a difference planted in synthetic A/B logs is found with an interval,
none is found where none was planted, a tiny real one is called negligible, seeds are counted."""
import subprocess
import sys

import numpy as np
import pytest

from otca_patch.analysis.compare import compare
from otca_patch.analysis.cycle import detect_cycle
from otca_patch.analysis.difference import block_interval
from otca_patch.runlog import RunLog

PROMPT_SWING = np.array([0.8, -0.6, 0.3, -0.5]) * 3  # the prompt cycle of 4 steps, far larger than any gap


def write_side(folder, shift=(0.0, 0.0), seed=0, steps=40, batch=8, from_step=1, last_line=None):
    """Objectives a (sample std 1) and b (sample std 2); a step's prompt moves both by the swing;
    ``shift`` is added from ``from_step`` on."""
    rng = np.random.default_rng(seed)
    log = RunLog(str(folder))
    for t in range(1, steps + 1):
        level = PROMPT_SWING[(t - 1) % 4] + 0.02 * t
        offset = np.array(shift) if t >= from_step else np.zeros(2)
        rows = np.stack([level + offset[0] + rng.normal(size=batch),
                         2 * level + offset[1] + 2 * rng.normal(size=batch)], axis=1)
        log.write({"step": t, "rank": 0, "world_size": 1, "mode": "otca", "observe": False,
                   "objectives": ["a", "b"], "rewards": rows.tolist()})
    if last_line is not None:
        with open(folder / "run_log.jsonl", "a") as handle:
            handle.write(last_line)
    return folder


def verdict_rows(report: str) -> dict:
    """{objective: (difference cell, verdict cell)} from the verdict table."""
    rows = {}
    section = report.split("## Verdict")[1].split("## Final scores")[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] in ("a", "b", "balanced"):
            rows[cells[0]] = (cells[3], cells[5])
    return rows


#: the report's words where it gives no label: the interval contains 0 within the threshold, or it
#: reaches across the threshold (not decided: more seeds decide it)
NOT_DECIDED = "not decided (the 95% interval reaches across the practical threshold: more seeds decide it)"
NO_LABEL = ("no detectable difference", NOT_DECIDED)


def interval_of(cell: str) -> tuple[float, float, float]:
    mean, bounds = cell.split(" [")
    low, high = bounds.rstrip("]").split(", ")
    return float(mean), float(low), float(high)


def test_a_planted_difference_is_detected_with_an_interval_that_covers_it(tmp_path):
    write_side(tmp_path / "vanilla", seed=1)
    write_side(tmp_path / "otca", shift=(0.8, 0.0), seed=2)
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out").read_text()
    rows = verdict_rows(report)
    mean, low, high = interval_of(rows["a"][0])
    assert low <= 0.8 <= high and low > 0  # the planted +0.8 on a, inside an interval that excludes 0
    assert rows["a"][1] == "**otca better**"
    assert rows["b"][1] in NO_LABEL, rows["b"][1]  # nothing planted on b: its interval reaches across the threshold
    assert rows["balanced"][1] == "**otca better**"
    assert "Stretches of 4 steps: the per-step scores repeat every 4 steps (the trainer's prompt order)" in report
    assert "averaged over 10 consecutive stretch(es) of 4 steps" in report


def test_no_difference_is_detected_where_none_was_planted(tmp_path):
    write_side(tmp_path / "vanilla", seed=1)
    write_side(tmp_path / "otca", seed=2)
    rows = verdict_rows(compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out").read_text())
    for name in ("a", "b", "balanced"):
        _, low, high = interval_of(rows[name][0])
        assert low < 0 < high and rows[name][1] in NO_LABEL, name


def test_a_real_but_tiny_difference_is_negligible_and_the_threshold_flag_changes_that(tmp_path):
    # both sides draw the same noise, so the planted +0.05 on a (a twentieth of its sigma 1) is the
    # exact step-paired difference: its interval excludes 0 and lies within the default +-0.1 sigma
    write_side(tmp_path / "vanilla", seed=1)
    write_side(tmp_path / "otca", shift=(0.05, 0.0), seed=1)  # the same noise: the difference is exactly 0.05
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out").read_text()
    rows = verdict_rows(report)
    assert rows["a"][1].startswith("negligible") and "+-0.1 sigma" in report
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out", threshold=0.01).read_text()
    assert verdict_rows(report)["a"][1] == "**otca better**"


def test_a_gap_in_one_half_only_is_not_called_a_difference(tmp_path):
    write_side(tmp_path / "vanilla", seed=1)
    # +1.5 from step 25: the whole run's interval already reaches across the threshold; +3.0 lies beyond
    # it over the whole run, but the halves disagree: neither is a label
    write_side(tmp_path / "otca", shift=(1.5, 0.0), seed=2, from_step=25)
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out").read_text()
    assert verdict_rows(report)["a"][1] == NOT_DECIDED and "not in both halves" not in report
    write_side(tmp_path / "otca3", shift=(3.0, 0.0), seed=2, from_step=25)
    report = compare([tmp_path / "vanilla", tmp_path / "otca3"], tmp_path / "out3").read_text()
    assert verdict_rows(report)["a"][1] == NOT_DECIDED and "better over the whole run, but not in both halves" in report


def test_seeds_per_side_are_compared_over_seeds_and_counted(tmp_path):
    for i in range(3):
        write_side(tmp_path / "vanilla" / f"seed{i}", seed=10 + i, steps=12)
        write_side(tmp_path / "otca" / f"seed{i}", shift=(0.0, 1.5), seed=20 + i, steps=12)
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out").read_text()
    assert "| vanilla (3 runs) | otca (3 runs) |" in report
    assert "3 seeds on each side, paired by seed: the spread of the 3 per-seed differences" in report
    rows = verdict_rows(report)
    assert rows["b"][1] == "**otca better**" and rows["a"][1] in NO_LABEL


def test_a_run_still_in_progress_is_compared_over_the_steps_both_logged(tmp_path):
    write_side(tmp_path / "vanilla", seed=1)
    write_side(tmp_path / "otca", shift=(0.8, 0.0), seed=2, steps=30, last_line='{"step": 31, "rank": 0, "rew')
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out").read_text()
    assert "cut short" in report and "differences use the steps both sides logged" in report
    assert "averaged over 7 consecutive stretch(es) of 4 steps" in report  # steps 3-30: the 28 latest common steps


def test_the_command_prints_the_balanced_verdict(tmp_path):
    write_side(tmp_path / "vanilla", seed=1)
    write_side(tmp_path / "otca", shift=(0.8, 0.0), seed=2)
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "compare", str(tmp_path / "vanilla"),
                           str(tmp_path / "otca"), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("otca - vanilla: Balanced score: +")]
    assert line.endswith("(95% interval, in sigmas): otca better.")


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "x"])
def test_window_and_cycle_must_be_whole_steps(tmp_path, value):
    write_side(tmp_path / "a", steps=8)
    write_side(tmp_path / "b", steps=8)
    for flag in ("--window", "--cycle"):
        done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "compare", str(tmp_path / "a"),
                               str(tmp_path / "b"), "--out", str(tmp_path / "out"), flag, value],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and f"expected a whole number of steps >= 1, got '{value}'" in done.stderr
        assert not (tmp_path / "out").exists()


def test_the_sigma_of_reward_txt_runs_is_stated_never_a_silent_one(tmp_path):
    for name, values in (("a", [0.1, 0.5, 0.2, 0.6, 0.3]), ("b", [0.2, 0.6, 0.3, 0.7, 0.4])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "reward.txt").write_text("".join(f"{v}\n" for v in values))
    report = compare([tmp_path / "a", tmp_path / "b"], tmp_path / "out", window=1).read_text()
    spread = 1.4826 * np.median(np.abs(np.array([0.1, 0.5, 0.2, 0.6, 0.3]) - 0.3))
    assert f"| upstream | 0.1000 | {spread:.4f} | no per-sample rewards: robust spread of a's per-step means" in report


def test_the_cycle_is_found_and_a_multiple_does_not_beat_it():
    rng = np.random.default_rng(0)
    steps = np.arange(60)
    assert detect_cycle(np.tile([1.5, -1.0, 0.3, -0.8], 15) * 3 + rng.normal(size=60))[0] == 4
    assert detect_cycle(rng.normal(size=60) + 0.01 * steps)[0] == 1


def test_block_interval_is_the_t_interval_of_the_latest_whole_blocks():
    values = np.array([100.0, 1, 3, 2, 4, 6, 8])  # the earliest remainder (100) is left out
    interval = block_interval(values, 2)
    means = np.array([2.0, 3.0, 7.0])
    half = 0.95 / np.sqrt(2 * 0.975 * 0.025) * means.std(ddof=1) / np.sqrt(3)  # t_{0.975, 2}, closed form
    assert interval["n"] == 3 and interval["mean"] == pytest.approx(4.0)
    assert (interval["low"], interval["high"]) == pytest.approx((4.0 - half, 4.0 + half))
