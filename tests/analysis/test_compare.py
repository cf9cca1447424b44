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
    # window 3: final = mean of the last three balanced scores; mu = sum's means over its first three
    # steps (2, 4), sigma (1, 2): otca's balanced score is ((3t-4) + (6t-8)/2)/2 = 3t-4, 23 over t = 8..10
    assert "| otca | 25.0000 | 50.0000 | +23.000 |" in report
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
    assert f"{log}:{STEPS + 1}: not a JSON record" in report and "cut short" in report
    assert f"{log}:{STEPS + 1}: not a JSON record" in capsys.readouterr().err


def test_a_bad_middle_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path):
    write_run(tmp_path / "a", base)
    log = tmp_path / "a" / "run_log.jsonl"
    lines = log.read_text().splitlines()
    lines[3] = lines[3][:40]
    log.write_text("\n".join(lines) + "\n")
    run = load_run(tmp_path / "a")
    assert [w for w in run.warnings if f"{log}:4: not a JSON record" in w]
    assert run.steps.tolist() == [1, 2, 3, 5, 6, 7, 8, 9, 10]


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
    with pytest.raises(LogError, match="needs a run"):
        compare([], tmp_path / "out")


def test_one_run_alone_gets_its_pictures_without_wandb(tmp_path):
    """A run whose launch kept wandb off: its run log gives the panels wandb would have shown."""
    write_run(tmp_path / "otca", fast, sizes=4)
    report = compare([tmp_path / "otca"], tmp_path / "out").read_text()
    for name in ("reward_upstream.png", "reward_clip_t.png", "balanced_score.png", "step_weights_otca.png",
                 "mixture_otca.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"({name})" in report
    # nothing that needs a second run: no verdict, no steps-to-reach table, no "reference"
    assert report.startswith("# Run otca\n")
    for needs_two in ("## Verdict", "Steps to reach", "reference", "comparison"):
        assert needs_two not in report, needs_two
    assert "## Final scores" in report and "## Balanced score" in report


def test_compare_on_folders_that_do_not_exist_names_them(tmp_path, capsys):
    from otca_patch.analysis.compare_command import main

    runs = tmp_path / "ab_runs" / "x"
    assert main([str(runs / "vanilla"), str(runs / "otca"), "--out", str(runs / "compare")]) == 2
    error = capsys.readouterr().err
    assert f"no such run folder or log file: {runs / 'vanilla'}, {runs / 'otca'}" in error
    assert "labels" not in error and not (runs / "compare").exists()


def test_the_header_names_the_trainer_file_each_side_ran(tmp_path):
    for side, file in (("vanilla", "fastvideo/train_grpo_flux.py"), ("otca", "fastvideo/train_grpo_flux_mine.py")):
        write_run(tmp_path / side, base, steps=4)
        log = tmp_path / side / "run_log.jsonl"
        records = [json.loads(line) for line in log.read_text().splitlines()]
        log.write_text("".join(json.dumps({**r, "spec": {"target": "dancegrpo-flux", "file": file}}) + "\n"
                               for r in records))
    write_run(tmp_path / "old", base, steps=4)  # a log without the spec record
    report = compare([tmp_path / "vanilla", tmp_path / "otca", tmp_path / "old"], tmp_path / "out").read_text()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[2] for line in report.splitlines()
            if line.startswith("| ") and "`" in line and "run_log.jsonl" in line}
    assert rows == {"vanilla": "`fastvideo/train_grpo_flux.py` (dancegrpo-flux)",
                    "otca": "`fastvideo/train_grpo_flux_mine.py` (dancegrpo-flux)",
                    "old": "not logged (a run log from before the layer recorded it)"}
    assert "the runs rewrote different trainer files" in report


def test_a_step_logged_twice_is_an_error_naming_both_lines(tmp_path):
    write_run(tmp_path / "a", base, steps=2)
    write_run(tmp_path / "b", base, steps=2)  # a second run appended to the same log (by hand: RunLog never does)
    with open(tmp_path / "a" / "run_log.jsonl", "a") as handle:
        handle.write((tmp_path / "b" / "run_log.jsonl").read_text())
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
    # the reference has no per-sample spread: sigma comes from the run that has one, and says so
    assert "| upstream | 1.0000 | 1.0000 | median over 10 logged steps of otca of the within-step sample std |" in report
    # the unterminated last line counts
    assert "| plain | 0.5000 | -0.500 |" in report
    assert "(upstream reward.txt only)" in report


def test_a_non_numeric_middle_line_of_reward_txt_is_skipped_naming_the_line(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "reward.txt").write_text("0.1\nnan?\n0.3\n")
    run = load_run(tmp_path / "plain")
    assert run.steps.tolist() == [1, 3] and any("reward.txt:2: 'nan?' is not a reward" in w for w in run.warnings)
    (tmp_path / "plain" / "reward.txt").write_text("oops\n")
    with pytest.raises(LogError, match=r"reward.txt: no finite rewards \(.*reward.txt:1: 'oops'"):
        load_run(tmp_path / "plain")


def test_labels_must_match_the_runs(tmp_path):
    write_run(tmp_path / "a", base)
    write_run(tmp_path / "b", fast)
    with pytest.raises(LogError, match="2 labels for 3 runs|3 runs"):
        compare([tmp_path / "a", tmp_path / "b", tmp_path / "b"], tmp_path / "out", labels=["x", "y"])
    report = compare([tmp_path / "a", tmp_path / "b"], tmp_path / "out", labels=["vanilla", "OTCA run"]).read_text()
    assert "| OTCA run |" in report and (tmp_path / "out" / "step_weights_OTCA_run.png").is_file()


# ---- every malformed record is a clear error or warning naming file:line


def one_record(**fields):
    record = {"step": 1, "rank": 0, "world_size": 1, "mode": "otca", "objectives": ["upstream", "clip_t"],
              "rewards": [[1.0, 2.0], [3.0, 4.0]], "step_weights": [[1.0, 1.0], [1.0, 1.0]],
              "mixture": [[0.5, 0.5], [0.5, 0.5]]}
    record.update(fields)
    return record


def write_records(folder, *records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder / "run_log.jsonl"


@pytest.mark.parametrize("fields, message", [
    ({"rewards": [[1.0, 2.0], [3.0]]}, r"'rewards' is ragged: its rows have \[1, 2\] entries"),
    ({"rewards": [[1.0, "high"], [3.0, 4.0]]}, r"'rewards' holds 'high', which is not a number"),
    ({"rewards": "1,2"}, r"'rewards' must be a list of rows"),
    ({"step": "1"}, r"'step' must be an integer, got '1'"),
    ({"step": None}, r"'step' must be an integer, got None"),
    ({"world_size": "two"}, r"'world_size' must be an integer, got 'two'"),
    ({"objectives": "upstream"}, r"'objectives' must be a non-empty list of names"),
])
def test_each_malformed_record_is_an_error_naming_file_and_line(tmp_path, fields, message):
    good = one_record()
    log = write_records(tmp_path / "a", good, one_record(**{"step": 2, **fields}))
    with pytest.raises(LogError, match=rf"{log}:2: {message}"):
        load_run(tmp_path / "a")


def test_the_compare_command_shows_no_traceback_for_a_malformed_log(tmp_path):
    write_records(tmp_path / "a", one_record(), one_record(step=2))
    write_records(tmp_path / "b", one_record(), one_record(step=2, rewards=[[1.0, 2.0], [3.0]]))
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"{tmp_path / 'b' / 'run_log.jsonl'}:2: 'rewards' is ragged" in done.stderr


def test_step_weights_whose_width_changes_are_left_out_with_a_warning(tmp_path):
    log = write_records(tmp_path / "a", one_record(), one_record(step=2, step_weights=[[1.0, 1.0, 1.0]] * 2))
    run = load_run(tmp_path / "a")
    assert run.step_weights is None and run.reward_mean.shape == (2, 2)
    assert any(f"{log}: step_weights has 2 columns from step 1 and 3 columns from step 2" in w for w in run.warnings)
    bad_mixture = write_records(tmp_path / "b", one_record(mixture=[[1.0], [1.0]]))
    run = load_run(tmp_path / "b")
    assert run.mixture is None and any(f"{bad_mixture}:1: 'mixture' has 1 columns per sample, expected 2" in w
                                       for w in run.warnings)


def test_non_finite_rewards_are_named_and_left_out_of_means_and_steps_to_reach(tmp_path):
    from otca_patch.analysis.metrics import reach_table, score_runs, standardiser_from

    log = tmp_path / "a" / "run_log.jsonl"
    log.parent.mkdir()
    lines = [json.dumps(one_record(step=s, rewards=[[s, s], [s + 2.0, s + 2.0]])) for s in (1, 2)]
    lines.append(json.dumps(one_record(step=3, rewards=[[1.0, 2.0], [3.0, 4.0]])).replace("[[1.0, 2.0]", "[[NaN, 2.0]"))
    lines.append(json.dumps(one_record(step=4, rewards=[[None, None], [None, None]])))
    log.write_text("\n".join(lines) + "\n")
    run = load_run(tmp_path / "a")
    assert any(f"{log}:3: 1 non-finite reward(s) (NaN, inf or null) of upstream (1)" in w for w in run.warnings)
    assert any("step 4 has no finite reward" in w for w in run.warnings)
    assert run.steps.tolist() == [1, 2, 3]
    assert run.reward_mean[2].tolist() == [3.0, 3.0]  # the NaN sample is left out, not averaged as 0
    txt = tmp_path / "b" / "reward.txt"
    txt.parent.mkdir()
    txt.write_text("0.1\n0.2\nnan\ninf\n0.3\n")
    other = load_run(tmp_path / "b")
    assert other.steps.tolist() == [1, 2, 5] and np.isfinite(other.reward_mean).all()
    assert any(f"{txt}:3: reward nan is not finite" in w for w in other.warnings)
    assert any(f"{txt}:4: reward inf is not finite" in w for w in other.warnings)
    scores = score_runs([other, other], 1, standardiser_from(other))
    assert np.isfinite(scores[0].final)
    assert all(v is not None for v in reach_table(scores).values())


# ---- the run log writes whole records or none


def test_a_short_write_is_completed_and_a_failed_write_leaves_a_readable_log(tmp_path, monkeypatch):
    import errno
    import os

    from otca_patch import runlog

    log = RunLog(str(tmp_path / "a"))
    log.write(one_record(step=1))
    real_write = os.write
    monkeypatch.setattr(runlog.os, "write", lambda fd, data: real_write(fd, data[:7]))  # short writes
    log.write(one_record(step=2))
    calls = []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, data[:20])  # part of the record lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runlog.os, "write", full_disk)
    with pytest.raises(OSError, match=r"could not write a whole record .*the partial record was removed"):
        log.write(one_record(step=3))
    monkeypatch.setattr(runlog.os, "write", real_write)
    log.write(one_record(step=4))
    run = load_run(tmp_path / "a")
    assert run.steps.tolist() == [1, 2, 4] and not run.warnings


def test_pathological_lines_are_skipped_with_a_warning_like_other_bad_lines(tmp_path):
    folder = tmp_path / "run"
    write_records(folder, one_record(step=1), one_record(step=2))
    with open(folder / "run_log.jsonl", "a") as handle:
        handle.write('{"deep": ' + "[" * 100000 + "]" * 100000 + "}\n")  # beyond Python's JSON recursion
        handle.write(json.dumps(one_record(step=10 ** 30)) + "\n")
    run = load_run(folder)
    assert run.steps.tolist() == [1, 2]
    assert any(":3: not a run record (JSON nested too deeply to read); skipped it" in w for w in run.warnings)
    assert any(":4: 'step' is 100000000000... (31 digits), beyond any run's; skipped it" in w for w in run.warnings)


def test_a_second_run_into_the_same_folder_starts_a_new_log_and_keeps_the_first(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    folder = tmp_path / "out"
    RunLog(str(folder)).write(one_record(step=1, mode="sum"))
    first = (folder / "run_log.jsonl").read_text()
    second = RunLog(str(folder))  # another run: its log must not continue the first one's
    assert "held another run's log; kept it as run_log." in capsys.readouterr().err
    second.write(one_record(step=1, mode="otca"))
    assert [json.loads(line)["mode"] for line in (folder / "run_log.jsonl").read_text().splitlines()] == ["otca"]
    kept = [p for p in folder.glob("run_log.*.jsonl")]
    assert len(kept) == 1 and kept[0].read_text() == first  # nothing written is lost
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # torchrun restarted the same job: it appends
    RunLog(str(folder)).write(one_record(step=2, mode="otca"))
    assert len((folder / "run_log.jsonl").read_text().splitlines()) == 2 and len(list(folder.glob("run_log.*"))) == 2


def test_samples_open_the_report_and_a_run_without_them_gets_grey_panels(tmp_path):
    import torch
    from PIL import Image

    from otca_patch.analysis.sample_panels import panel_grid
    from otca_patch.analysis.sides import load_side
    from otca_patch.sample_grid import MISSING
    from otca_patch.samples import SampleKeeper

    write_run(tmp_path / "plain", base)
    assert "samples.png" not in compare([tmp_path / "plain", write_run(tmp_path / "a", fast)],
                                        tmp_path / "none").read_text()
    assert not (tmp_path / "none" / "samples.png").exists()  # no run kept samples: no picture
    keeper = SampleKeeper(tmp_path / "a")
    for step in (1, STEPS):
        keeper.add(torch.full((2, 3, 8, 8), step / STEPS / 2), ["a cat", "a dog"])
        keeper.end_step(step)
    report = compare([tmp_path / "a", tmp_path / "plain"], tmp_path / "out").read_text().splitlines()
    assert report[2] == "![samples](samples.png)"
    assert any(line.startswith("No samples kept by plain") for line in report[:8])
    written = np.asarray(Image.open(tmp_path / "out" / "samples.png").convert("RGB"))
    grid, _ = panel_grid([load_side(tmp_path / "a", "a"), load_side(tmp_path / "plain", "plain")])
    assert np.array_equal(written, np.asarray(grid.image))
    cells = {key: written[top:bottom, left:right] for key, (left, top, right, bottom) in grid.boxes.items()}
    assert sorted(cells) == [(row, c) for row in (0, 1) for c in range(4)]  # 2 prompts at steps 1 and 10
    for c in range(4):
        assert (cells[0, c] == (13 if c < 2 else 128)).all()  # 0.05 and 0.5 of 255
        assert (cells[1, c] == MISSING).all()  # the run without samples: grey panels


def keep_walk(folder, walk, brighter=0.0):
    """Kept samples of a run whose step t saw the prompts ``walk[t - 1]`` (images as bright as t/10)."""
    import torch

    from otca_patch.samples import SampleKeeper

    keeper = SampleKeeper(folder)
    for step, prompts in enumerate(walk, start=1):
        keeper.add(torch.full((len(prompts), 3, 8, 8), step / 10 + brighter * (step > 1)), prompts)
        keeper.end_step(step)


def laid_out(monkeypatch, folders):
    """What ``panel_grid`` laid out for run folders: (column prompts per group, group headings, caption)."""
    import otca_patch.analysis.sample_panels as panels
    from otca_patch.analysis.sides import load_side

    seen = {}
    real = panels.sample_grid

    def spy(rows, columns, groups=(), **kwargs):
        seen.update(columns=list(columns), groups=list(groups), rows=rows)
        return real(rows, columns, groups=groups, **kwargs)

    monkeypatch.setattr(panels, "sample_grid", spy)
    _, caption = panels.panel_grid([load_side(folder, folder.name) for folder in folders])
    spans = [span for _, span in seen["groups"]]
    columns = [seen["columns"][:spans[0]], seen["columns"][spans[0]:]]
    return columns, [title for title, _ in seen["groups"]], caption, seen["rows"]


def test_the_sample_grid_shows_the_first_steps_prompts_again_in_its_later_columns(tmp_path, monkeypatch):
    walk = [["a cat", "a cat"], ["a dog", "a dog"], ["a cat", "a cat"], ["a dog", "a dog"]]
    for side, brighter in (("vanilla", 0.0), ("otca", 0.05)):
        write_run(tmp_path / side, base, steps=4)
        keep_walk(tmp_path / side, walk, brighter)
    columns, groups, caption, rows = laid_out(monkeypatch, [tmp_path / "vanilla", tmp_path / "otca"])
    assert columns[0] == columns[1] == ["a cat", "a cat"]  # the same prompts across the columns
    assert groups == ["first step: step 1", "the same prompts again: step 3"]
    assert "the latest step that saw the same prompts again" in caption
    later = [np.asarray(image)[0, 0, 0] for image in rows[1][1][2:]]
    assert later == [round(255 * 0.35)] * 2  # otca's samples of step 3


def test_a_run_that_never_sees_its_first_prompts_again_says_so(tmp_path, monkeypatch):
    walk = [["a cat"], ["a dog"]]
    for side in ("vanilla", "otca"):
        write_run(tmp_path / side, base, steps=2)
        keep_walk(tmp_path / side, walk)
    columns, groups, caption, _ = laid_out(monkeypatch, [tmp_path / "vanilla", tmp_path / "otca"])
    assert columns == [["a cat"], ["a dog"]] and groups[1] == "last step, other prompts: step 2"
    assert "never came back to the first step's prompts" in caption
