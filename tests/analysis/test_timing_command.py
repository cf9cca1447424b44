"""``otca-patch timing`` on a tiny demo run, a tiny ablate folder (every regime, with the timed arms) and
a run log; and what the demo logs for it (the map per evaluation, the timed variants' weights)."""
import json
import re

import pytest
from demo_fixtures import one_thread, tiny_flags  # noqa: F401 (autouse)

from otca_patch.analysis import timing
from otca_patch.demo import ablate, cli

#: the map needs groups of two or more evaluation samples (within-group variation)
EVAL_FLAGS = ["--eval_prompts", "3", "--eval_samples_per_prompt", "2", "--group_size", "3", "--grpo_steps", "3"]
LINE = re.compile(r"^\s*(?:.+: )?(\w+): 80% decided by step (\d+) of (\d+)$")


def _flags():
    skip = {"modes", "seeds", "eval_prompts", "eval_samples_per_prompt", "group_size", "grpo_steps"}
    return tiny_flags(skip=tuple(skip)) + EVAL_FLAGS


@pytest.mark.slow
def test_timing_of_a_tiny_demo_run(tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["--out", str(out), "--base_cache", str(tmp_path), "--modes", "multi_grpo,multi_grpo_timed",
                     "--seeds", "0"] + _flags()) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    steps, objectives = metrics["config"]["sampling_steps"], metrics["objectives"]
    for run in metrics["runs"]:
        history = run["history"]
        # one map per evaluation (the base model's first), [K][T], values in [0, 1]; the last step's
        # prediction is the scored image, so it is fully decided wherever the map is defined
        assert len(history["objective_timing"]) == len(history["eval_iterations"])
        for value in history["objective_timing"]:
            assert len(value) == len(objectives) and all(len(row) == steps for row in value)
            assert all(row[-1] is None or row[-1] == pytest.approx(1.0, abs=1e-9) for row in value)
    timed = next(r for r in metrics["runs"] if r["mode"] == "multi_grpo_timed")["history"]["objective_step_weights"]
    assert len(timed) == 3 and timed[0] == [[1.0] * steps] * len(objectives)  # iteration 0: not measured yet
    assert any(abs(w - 1.0) > 1e-3 for row in timed[-1] for w in row)  # then the map moves the weights ...
    assert all(sum(row) / steps == pytest.approx(1.0, abs=1e-5) for row in timed[-1])  # ... keeping mean 1
    assert "![when each objective is decided](timing.png)" in (out / "report.md").read_text()
    assert (out / "timing.png").stat().st_size > 0
    capsys.readouterr()

    assert timing.main([str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "base model:" and lines[-1] == f"wrote {out / 'timing.png'} and {out / 'timing.json'}"
    named = [LINE.match(line) for line in lines[1:1 + len(objectives)]]
    assert [m.group(1) for m in named] == objectives and all(m.group(3) == str(steps) for m in named)
    summary = json.loads((out / "timing.json").read_text())
    assert summary["maps"][0]["label"] == "base model" and len(summary["maps"]) == 3  # base + two variants
    base = summary["maps"][0]
    assert base["decided"] == metrics["runs"][0]["history"]["objective_timing"][0]
    assert base["dof"] == 3  # 3 evaluation prompts x (2 - 1)
    for row, low, high in zip(base["decided"], base["interval_95"]["low"], base["interval_95"]["high"]):
        assert all(v is None or lo - 1e-9 <= v <= hi + 1e-9 for v, lo, hi in zip(row, low, high))


@pytest.mark.slow
def test_ablate_runs_the_timed_arms_in_every_regime_and_timing_reads_the_folder(tmp_path, capsys):
    out = tmp_path / "ablate"
    modes = "multi_grpo,otca,multi_grpo_timed,otca_timed"
    assert ablate.main(["--out", str(out), "--base_cache", str(tmp_path), "--modes", modes, "--seeds", "0",
                        "--regime", "all"] + _flags()) == 0
    for regime in ("conflicting", "agreeing", "hacking"):
        result = json.loads((out / regime / "ablation.json").read_text())
        assert result["modes"] == modes.split(",")
        rows = {row["to"] for row in result["decomposition"]}
        assert {"multi_grpo_timed", "otca_timed"} <= rows
        assert (out / regime / "timing.png").is_file()
        assert "![when each objective is decided](timing.png)" in (out / regime / "ablation.md").read_text()
    capsys.readouterr()
    assert timing.main([str(out), "--out", str(tmp_path / "maps")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if not line.startswith(" ")][:3] == [
        "conflicting: base model:", "agreeing: base model:", "hacking: base model:"]
    summary = json.loads((tmp_path / "maps" / "timing.json").read_text())
    assert len(summary["maps"]) == 3 * 5 and (tmp_path / "maps" / "timing.png").is_file()


def test_timing_of_a_run_log_reads_its_last_map(tmp_path, capsys):
    records = [{"step": 1, "rank": 0, "objectives": ["aesthetic", "clip_t"], "rewards": [[0.1, 0.2]]},
               {"step": 2, "rank": 0, "objectives": ["aesthetic", "clip_t"], "rewards": [[0.1, 0.2]],
                "objective_timing": [[0.5, 0.9, 1.0], [None, None, None]]},
               {"step": 3, "rank": 0, "objectives": ["aesthetic", "clip_t"], "rewards": [[0.1, 0.2]],
                "objective_timing": [[0.1, 0.85, 1.0], [0.2, 0.4, 0.79]]}]
    log = tmp_path / "run_log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert timing.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the last record with a map; clip_t never reaches 0.8 before the last step, so "by step 3 of 3"
    assert lines[:2] == ["aesthetic: 80% decided by step 2 of 3", "clip_t: 80% decided by step 3 of 3"]
    summary = json.loads((tmp_path / "timing.json").read_text())
    assert summary["maps"][0]["label"] == "run log, step 3" and summary["maps"][0]["decided_by"] == {
        "aesthetic": 2, "clip_t": 3}
    assert timing.main([str(log), "--share", "0.5"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["aesthetic: 50% decided by step 2 of 3",
                                                       "clip_t: 50% decided by step 3 of 3"]


def test_a_path_without_a_map_is_one_clear_line(tmp_path, capsys):
    (tmp_path / "run_log.jsonl").write_text(json.dumps({"step": 1, "objectives": ["a"], "rewards": [[1.0]]}) + "\n")
    assert timing.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"otca-patch timing: {tmp_path / 'run_log.jsonl'}: no record has objective_timing (a target logs " \
                  "it where its probe runs)"
    assert timing.main([str(tmp_path / "missing")]) == 1
    assert "no such file or folder" in capsys.readouterr().err
    assert timing.main([str(tmp_path), "--share", "0"]) == 2
    assert "--share: must lie in (0, 1]" in capsys.readouterr().err


def test_the_command_is_registered():
    from otca_patch.cli import COMMANDS

    assert COMMANDS["timing"][0] == "otca_patch.analysis.timing"
