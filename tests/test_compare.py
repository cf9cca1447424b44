"""`otca-patch compare` on small synthetic run logs, written by the layer's own RunLog."""
import json
import subprocess
import sys

import numpy as np
import pytest

from otca_patch.analysis.compare import compare
from otca_patch.analysis.logs import LogError, load_run
from otca_patch.runlog import RunLog

STEPS = 10


def write_run(folder, means_at, objectives=("upstream", "clip_t"), observe=False, mode="otca", ranks=1,
              steps=STEPS, sizes=3):
    """Each step t: two samples per rank, objective k at means_at(t)[k] +- spread_k (spread k+1)."""
    log = RunLog(str(folder))
    for step in range(1, steps + 1):
        for rank in range(ranks):
            means = means_at(step)
            rows = [[m - (k + 1) for k, m in enumerate(means)], [m + (k + 1) for k, m in enumerate(means)]]
            weights = [[step + s for s in range(sizes)]] * 2
            log.write({"step": step, "rank": rank, "world_size": ranks, "mode": mode, "observe": observe,
                       "config": {"mode": mode}, "objectives": list(objectives), "rewards": rows,
                       "step_weights": weights, "mixture": [[0.25, 0.75], [0.75, 0.25]],
                       "summary": {"conflict_share": 0.0}})
    return folder


def base(t):  # balanced score t-1 against itself: objective means t and 2t, first-step stds 1 and 2
    return [t, 2 * t]


def fast(t):  # balanced score 2t-2
    return [2 * t - 1, 4 * t - 2]


def test_report_numbers_follow_the_documented_definitions(tmp_path):
    write_run(tmp_path / "vanilla", base, observe=True, mode="otca")
    write_run(tmp_path / "otca", fast)
    report = compare([tmp_path / "vanilla", tmp_path / "otca"], tmp_path / "out", window=1).read_text()
    # finals: balanced 9 and 18; otca reaches 9 at 2t-2 >= 9 -> t = 6; vanilla never reaches 18
    assert "| vanilla | 10.0000 | 20.0000 | +9.000 |" in report
    assert "| otca | 19.0000 | 38.0000 | +18.000 |" in report
    assert "| vanilla | - | never |" in report
    assert "| otca | 6 | - |" in report
    assert "| upstream | 1.0000 | 1.0000 |" in report and "| clip_t | 2.0000 | 2.0000 |" in report
    for name in ("reward_upstream.png", "reward_clip_t.png", "balanced_score.png", "step_weights_otca.png",
                 "mixture_otca.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"({name})" in report
    # the observed side logged credit it did not train with: no heatmap for it
    assert not (tmp_path / "out" / "step_weights_vanilla.png").exists()


def test_three_runs_side_by_side_and_the_smoothed_band(tmp_path):
    for name, means in (("sum", base), ("tcd", fast), ("otca", lambda t: [3 * t - 2, 6 * t - 4])):
        write_run(tmp_path / name, means, mode=name)
    report = compare([tmp_path / n for n in ("sum", "tcd", "otca")], tmp_path / "out", window=3).read_text()
    # window 3: final = mean of the last three balanced scores; otca's balanced score is 3t-3
    assert "| otca | 25.0000 | 50.0000 | +24.000 |" in report
    assert "| sum | - | never | never |" in report
    assert len(list((tmp_path / "out").glob("step_weights_*.png"))) == 3


def test_means_cover_every_rank(tmp_path):
    log = RunLog(str(tmp_path / "run"))
    for rank, rewards in ((0, [[1.0], [3.0]]), (1, [[5.0], [7.0]])):
        log.write({"step": 1, "rank": rank, "world_size": 2, "objectives": ["upstream"], "rewards": rewards})
    run = load_run(tmp_path / "run")
    assert run.reward_mean.tolist() == [[4.0]] and run.samples.tolist() == [4]
    assert run.reward_std[0, 0] == pytest.approx(np.std([1, 3, 5, 7]))


def test_a_step_missing_a_rank_is_left_out_with_a_warning(tmp_path):
    write_run(tmp_path / "run", base, ranks=2, steps=3)
    lines = (tmp_path / "run" / "run_log.jsonl").read_text().splitlines()
    (tmp_path / "run" / "run_log.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # step 3 rank 1 never written
    run = load_run(tmp_path / "run")
    assert run.steps.tolist() == [1, 2]
    assert any("step 3 has 1 of 2 ranks" in w for w in run.warnings)


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path, capsys):
    write_run(tmp_path / "a", base)
    write_run(tmp_path / "b", fast)
    log = tmp_path / "b" / "run_log.jsonl"
    log.write_text(log.read_text() + '{"step": 11, "rank": 0, "objectives": ["upst')  # killed mid-write
    report = compare([tmp_path / "a", tmp_path / "b"], tmp_path / "out", window=1).read_text()
    assert "| b | 19.0000 | 38.0000 | +18.000 |" in report  # step 10 is still its last step
    assert f"{log}:{STEPS + 1}: last line is not complete JSON" in report
    assert "last line is not complete JSON" in capsys.readouterr().err


def test_a_bad_middle_line_names_file_and_line(tmp_path):
    write_run(tmp_path / "a", base)
    log = tmp_path / "a" / "run_log.jsonl"
    lines = log.read_text().splitlines()
    lines[3] = lines[3][:40]
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogError, match=rf"{log}:4: not a JSON record"):
        load_run(tmp_path / "a")


def test_mismatched_objectives_name_both_lists_and_nothing_is_written(tmp_path):
    write_run(tmp_path / "a", base)
    write_run(tmp_path / "b", lambda t: [t, t, t], objectives=("upstream", "clip_t", "aesthetic"))
    command = [sys.executable, "-m", "otca_patch.cli", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
               "--out", str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "['upstream', 'clip_t']" in done.stderr and "['upstream', 'clip_t', 'aesthetic']" in done.stderr
    assert "--objectives upstream,clip_t" in done.stderr
    assert not (tmp_path / "out").exists()
    # the suggested subset works
    done = subprocess.run(command + ["--objectives", "upstream,clip_t"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "report.md").is_file()


def test_empty_and_missing_logs_are_clear_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "run_log.jsonl").write_text("\n")
    with pytest.raises(LogError, match="no records"):
        load_run(tmp_path / "empty")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(LogError, match="no run_log.jsonl and no reward.txt"):
        load_run(tmp_path / "nothing")
    with pytest.raises(LogError, match="no such run folder"):
        load_run(tmp_path / "absent")
    write_run(tmp_path / "a", base)
    with pytest.raises(LogError, match="at least two runs"):
        compare([tmp_path / "a"], tmp_path / "out")


def test_a_step_logged_twice_is_an_error_naming_both_lines(tmp_path):
    write_run(tmp_path / "a", base, steps=2)
    write_run(tmp_path / "a", base, steps=2)  # a second run appended to the same folder
    with pytest.raises(LogError, match=r"run_log.jsonl:3: step 1 rank 0 was already logged on line 1"):
        load_run(tmp_path / "a")


def test_record_without_rewards_names_the_field(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run_log.jsonl").write_text(json.dumps({"step": 1, "rank": 0, "objectives": ["x"]}) + "\n")
    with pytest.raises(LogError, match=r"run_log.jsonl:1: record lacks rewards"):
        load_run(tmp_path / "a")


def test_upstream_reward_txt_compares_with_a_logged_run(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "reward.txt").write_text("".join(f"{t}\n" for t in range(1, STEPS + 1)) + "0.5")
    write_run(tmp_path / "otca", fast)
    with pytest.raises(LogError, match="objectives differ"):
        compare([tmp_path / "plain", tmp_path / "otca"], tmp_path / "out")
    report = compare([tmp_path / "plain", tmp_path / "otca"], tmp_path / "out", window=1,
                     objectives=("upstream",)).read_text()
    # the reference has no per-sample spread: sigma 1, said so; the unterminated last line counts
    assert "| upstream | 1.0000 | 1.0000 (no spread: 1) |" in report
    assert "| plain | 0.5000 | -0.500 |" in report
    assert "(upstream reward.txt only)" in report


def test_a_non_numeric_middle_line_of_reward_txt_names_the_line(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "reward.txt").write_text("0.1\nnan?\n0.3\n")
    with pytest.raises(LogError, match=r"reward.txt:2: 'nan\?' is not a reward"):
        load_run(tmp_path / "plain")


def test_labels_must_match_the_runs(tmp_path):
    write_run(tmp_path / "a", base)
    write_run(tmp_path / "b", fast)
    with pytest.raises(LogError, match="2 labels for 3 runs|3 runs"):
        compare([tmp_path / "a", tmp_path / "b", tmp_path / "b"], tmp_path / "out", labels=["x", "y"])
    report = compare([tmp_path / "a", tmp_path / "b"], tmp_path / "out", labels=["vanilla", "OTCA run"]).read_text()
    assert "| OTCA run |" in report and (tmp_path / "out" / "step_weights_OTCA_run.png").is_file()
