"""The demo's machinery end to end at tiny sizes: rollout shapes, credit from the engine, the update's
loss on a hand-computable case, determinism, the report folder, the cache and error handling."""
import json

import pytest
import torch

import otca_patch.credit
from otca_patch.credit import compute_credit as real_compute_credit
from otca_patch.demo import cli, grpo
from otca_patch.demo.config import tiny_config
from otca_patch.demo.experiment import run_experiment
from otca_patch.demo.pixel_rewards import OBJECTIVES
from otca_patch.demo.pretrain import base_model_path, load_or_train_base_model
from otca_patch.demo.report import REPORT_FILES
from otca_patch.demo.variants import VARIANTS


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The demo's setting: tiny matrices gain nothing from threads, and lose a lot on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny base model trained once for the module (a few flow-matching steps)."""
    config = tiny_config(out=str(tmp_path_factory.mktemp("base")))
    model, info = load_or_train_base_model(config, log=lambda msg: None)
    return config, model, info


def test_rollout_shapes_groups_and_shared_initial_noise(base):
    config, model, _ = base
    batch = grpo.collect_batch(model, config, seed=0, iteration=0)
    b, t = config.batch_size, config.sampling_steps
    n_tokens, channels = model.token_shape
    assert batch.rollout.latents.shape == (b, t + 1, n_tokens, channels)
    assert batch.rollout.log_probs.shape == (b, t)
    assert batch.rollout.clean.shape == (b, t + 1, n_tokens, channels)
    assert batch.rewards.shape == (b, len(OBJECTIVES))
    assert batch.group_ids.tolist() == [0, 0, 1, 1]
    assert torch.equal(batch.prompt_ids[0], batch.prompt_ids[1])
    assert torch.equal(batch.rollout.latents[0, 0], batch.rollout.latents[1, 0])  # init_same_noise
    assert not torch.equal(batch.rollout.latents[0, -1], batch.rollout.latents[1, -1])  # SDE noise differs
    again = grpo.collect_batch(model, config, seed=0, iteration=0)
    assert torch.equal(again.rollout.latents, batch.rollout.latents)  # same iteration, same draws


def test_update_loss_with_ratio_one_is_minus_mean_clipped_advantage(base):
    """One optimizer step at the end of the pass keeps the policy fixed, so every ratio is 1 and
    the summed loss is -mean over trained (sample, step) pairs of the clipped advantage."""
    config, model, _ = base
    config = tiny_config(out=config.out, sampling_steps=6, timestep_fraction=0.6, micro_batch=2, grad_accum=2,
                         adv_clip_max=1.5)
    batch = grpo.collect_batch(model, config, seed=0, iteration=0)
    advantages = torch.tensor([[3.0], [-1.0], [0.5], [-2.0]]).expand(-1, config.sampling_steps)
    trainee = _copy(model)
    optimizer = torch.optim.SGD([p for p in trainee.parameters() if p.requires_grad], lr=0.0)
    stats = grpo.policy_update(trainee, optimizer, batch, advantages, config, seed=0, iteration=0)
    expected = -advantages.clamp(-1.5, 1.5)[:, 0].mean().item()  # constant over steps
    assert stats["loss"] == pytest.approx(expected, abs=1e-4)
    assert stats["clip_fraction"] == 0.0


def test_every_mode_takes_its_advantages_from_compute_credit(base, monkeypatch):
    config, model, _ = base
    seen_modes, produced, used = [], [], []

    def spy_credit(rewards, latents, group_ids, credit_config=None, **kwargs):
        seen_modes.append(credit_config.mode)
        credit = real_compute_credit(rewards, latents, group_ids, credit_config, **kwargs)
        produced.append(credit.advantages)
        return credit

    real_update = grpo.policy_update

    def spy_update(model_, optimizer, batch, advantages, config_, seed, iteration, **kwargs):
        used.append(advantages)
        return real_update(model_, optimizer, batch, advantages, config_, seed, iteration, **kwargs)

    monkeypatch.setattr(otca_patch.credit, "compute_credit", spy_credit)
    monkeypatch.setattr(grpo, "policy_update", spy_update)
    from otca_patch.demo.evaluation import make_eval_set

    config = tiny_config(out=config.out, grpo_steps=1)
    eval_set = make_eval_set(config, model.token_shape)
    for mode in ("sum", "gdpo", "otca"):
        grpo.train_mode(model, config, VARIANTS[mode], 0, eval_set, [0.0] * len(OBJECTIVES))
    assert seen_modes == ["sum", "gdpo", "otca"]
    assert all(a is b for a, b in zip(produced, used))


def test_the_rms_control_has_multi_grpo_direction_and_moca_scale(base):
    config, model, _ = base
    config = tiny_config(out=config.out, prompts_per_step=2, group_size=4, micro_batch=8)
    batch = grpo.collect_batch(model, config, seed=0, iteration=0)
    _, scaled = grpo.assign_credit(batch, VARIANTS["multi_grpo_moca_rms"])
    _, plain = grpo.assign_credit(batch, VARIANTS["multi_grpo"])
    moca = real_compute_credit(batch.rewards, batch.rollout.latents, batch.group_ids,
                               otca_patch.credit.CreditConfig(mode="moca"))
    rms = lambda x: x.pow(2).mean().sqrt()  # noqa: E731
    assert rms(scaled).item() == pytest.approx(rms(moca.advantages).item(), rel=1e-5)
    nonzero = plain.abs() > 1e-6
    ratio = scaled[nonzero] / plain[nonzero]
    assert nonzero.any() and torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-4)


def test_training_leaves_the_base_model_untouched(base):
    config, model, _ = base
    before = {k: v.clone() for k, v in model.state_dict().items()}
    from otca_patch.demo.evaluation import make_eval_set

    config = tiny_config(out=config.out, grpo_steps=1)
    trained, history = grpo.train_mode(model, config, VARIANTS["otca"], 0, make_eval_set(config, model.token_shape),
                                       [0.0] * 3)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(before[k], v) for k, v in trained.state_dict().items())
    assert history.drift[0] == 0.0 and history.drift[-1] > 0  # it moved away from the base model


def test_two_runs_with_the_same_seed_give_identical_numbers(base):
    config, _, _ = base
    first = run_experiment(tiny_config(out=config.out, grpo_steps=1, modes="sum,otca"), log=lambda msg: None)
    second = run_experiment(tiny_config(out=config.out, grpo_steps=1, modes="sum,otca"), log=lambda msg: None)
    assert [r["history"] for r in first["runs"]] == [r["history"] for r in second["runs"]]
    other = run_experiment(tiny_config(out=config.out, seeds="1", grpo_steps=1, modes="sum,otca"), log=lambda msg: None)
    assert other["runs"][0]["history"]["train_rewards"] != first["runs"][0]["history"]["train_rewards"]
    # both modes saw the same first rollout (same base model, same prompts and noise)
    assert first["runs"][0]["history"]["train_rewards"][0] == first["runs"][1]["history"]["train_rewards"][0]


def test_runs_are_paired_by_seed_and_summarised_with_intervals(base):
    config, _, _ = base
    result = run_experiment(tiny_config(out=config.out, grpo_steps=1, modes="multi_grpo,otca", seeds="0,1"),
                            log=lambda msg: None)
    assert [(r["mode"], r["seed"]) for r in result["runs"]] == [("multi_grpo", 0), ("otca", 0), ("multi_grpo", 1), ("otca", 1)]
    by = {(r["mode"], r["seed"]): r for r in result["runs"]}
    for k in OBJECTIVES:
        closed = [(by["otca", s]["final"][k] - result["base"][k]) / (result["oracle"][k] - result["base"][k]) for s in (0, 1)]
        assert by["otca", 0]["gap_closed"][k] == pytest.approx(closed[0], abs=1e-6)
        differences = [by["otca", s]["gap_closed"][k] - by["multi_grpo", s]["gap_closed"][k] for s in (0, 1)]
        stat = result["comparisons"]["otca"][k]
        assert stat["values"] == pytest.approx(differences)
        assert stat["low"] <= stat["mean"] <= stat["high"]
    assert result["oracle"] == pytest.approx({k: 1.0 for k in OBJECTIVES}, abs=1e-5)
    assert all(r["drift"] > 0 for r in result["runs"])
    assert "otca" in result["verdicts"]
    # the samples shown: seed 0's, the same base-model images at iteration 0 in both variants, not after
    samples = result["samples"]
    assert samples["seed"] == 0 and samples["iterations"] == [0, 1] and len(samples["prompts"]) == 2
    assert samples["first"]["multi_grpo"] == samples["first"]["otca"]
    assert samples["last"]["multi_grpo"] != samples["last"]["otca"]
    assert samples["first"]["otca"] != samples["last"]["otca"]
    assert all(p.startswith("a ") and " on " in p for p in samples["prompts"])


def test_the_report_opens_with_each_variants_samples_before_and_after(base, tmp_path):
    import numpy as np
    from PIL import Image

    from otca_patch.demo.report import samples_grid, write_report

    config, _, _ = base
    result = run_experiment(tiny_config(out=config.out, grpo_steps=1, modes="multi_grpo,otca"), log=lambda msg: None)
    paths = write_report(result, tmp_path)
    assert tmp_path / "samples.png" in paths
    report = (tmp_path / "report.md").read_text()
    assert "![samples](samples.png)" in report.split("## Setup")[0]  # before the setup and the tables
    assert "samples" not in json.loads((tmp_path / "metrics.json").read_text())
    written = np.asarray(Image.open(tmp_path / "samples.png").convert("RGB"))
    grid = samples_grid(result)
    assert np.array_equal(written, np.asarray(grid.image))
    cell = {key: written[top:bottom, left:right] for key, (left, top, right, bottom) in grid.boxes.items()}
    assert sorted(grid.boxes) == [(row, c) for row in (0, 1) for c in range(4)]  # 2 variants x 2 prompts x 2 times
    for c in (0, 1):
        assert np.array_equal(cell[0, c], cell[1, c])  # iteration 0: the base model in both rows
        assert not np.array_equal(cell[0, 2 + c], cell[1, 2 + c])  # after training: each variant's own
        # an 8-pixel image enlarged sharply: each pixel a block of equal values
        image = np.asarray(result["samples"]["first"]["otca"][c], dtype=np.uint8)
        block = cell[1, c].shape[0] // image.shape[0]
        assert np.array_equal(cell[1, c], np.kron(image, np.ones((block, block, 1), dtype=np.uint8)))


def test_the_report_speaks_to_its_reader_about_this_run_only(base, tmp_path):
    import re

    from otca_patch.demo.report import write_report

    config, _, _ = base
    result = run_experiment(tiny_config(out=config.out, grpo_steps=1, modes="sum_raw,otca"), log=lambda msg: None)
    write_report(result, tmp_path)
    report = (tmp_path / "report.md").read_text()
    # no pasted docstrings, module names, file paths of this repository or section numbers
    for note in re.findall(r"``|otca_patch|\w+\.py\b|docs/|credit\.md|section \d|\bspec \d", report):
        raise AssertionError(f"the report carries an internal note: {note!r}")
    # only this run's regime: not a paragraph about the others
    assert result["regime"] == "conflicting" and "agreeing" not in report and "hacking" not in report
    assert "vividness" not in report and "fidelity" not in report
    # every column of the results table is explained, the gradient conflict in plain words
    measures = report.split("### Measures")[1].split("## Results")[0]
    for column in ("Gap closed", "Drift", "Gradient conflict", "Worst cosine"):
        assert f"**{column}**" in measures, column
    assert "pointed against the applied update" in measures
    assert "counts 20 times as much" in report  # sum_raw ran: its raw scales are said


def test_finished_runs_are_kept_and_reused_with_resume(base, tmp_path, monkeypatch):
    config, _, _ = base
    settings = dict(out=str(tmp_path), base_cache=config.out, grpo_steps=1, modes="multi_grpo,otca", resume=True)
    first = run_experiment(tiny_config(**settings), log=lambda msg: None)
    assert len(list((tmp_path / "finished_runs").iterdir())) == 2
    import otca_patch.demo.experiment as experiment

    real = experiment.run_jobs
    asked = []

    def counting(jobs, *args, **kwargs):
        asked.append([(j.mode, j.seed) for j in jobs])
        return real(jobs, *args, **kwargs)

    monkeypatch.setattr(experiment, "run_jobs", counting)
    again = run_experiment(tiny_config(**settings), log=lambda msg: None)
    assert asked == [[]] and [r["history"] for r in again["runs"]] == [r["history"] for r in first["runs"]]
    run_experiment(tiny_config(**{**settings, "modes": "multi_grpo,otca,moca"}), log=lambda msg: None)
    assert asked[-1] == [("moca", 0)]  # only the new variant runs
    run_experiment(tiny_config(**{**settings, "learning_rate": 1e-3}), log=lambda msg: None)
    assert asked[-1] == [("multi_grpo", 0), ("otca", 0)]  # a changed training field reuses nothing


def _tiny_flags(out):
    from otca_patch.demo.config import TINY_SIZES

    flags = ["--out", str(out)]
    for name, value in TINY_SIZES.items():
        flag = "--" + name
        if isinstance(value, bool):
            flags.append(flag if value else "--no_" + name)
        else:
            flags += [flag, str(value)]
    return flags


@pytest.mark.slow
def test_demo_command_writes_the_report_and_reuses_the_cached_base_model(tmp_path, capsys):
    assert cli.main(_tiny_flags(tmp_path)) == 0
    for name in REPORT_FILES:
        assert (tmp_path / name).is_file() and (tmp_path / name).stat().st_size > 0, name
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["modes"] == ["multi_grpo", "otca"] and metrics["base_model"]["cached"] is False
    assert metrics["objectives"] == list(OBJECTIVES)
    assert set(metrics["base"]) == set(metrics["oracle"]) == set(OBJECTIVES)
    for run in metrics["runs"]:
        assert set(run["final"]) == set(OBJECTIVES) and run["drift"] >= 0 and run["mode"] in metrics["modes"]
    report = (tmp_path / "report.md").read_text()
    assert "gap closed" in report and "Verdict" in report
    assert (tmp_path / "reward_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "samples.png").read_bytes()[:4] == b"\x89PNG" and "![samples](samples.png)" in report
    assert cli.main(_tiny_flags(tmp_path)) == 0
    assert json.loads((tmp_path / "metrics.json").read_text())["base_model"]["cached"] is True
    assert "otca - multi_grpo" in capsys.readouterr().out.replace("`", "")


@pytest.mark.parametrize("flags, message", [
    (["--modes", "sum,nope"], "unknown credit mode 'nope'"),
    (["--grpo_steps", "-3"], "--grpo_steps: must be >= 1"),
    (["--seeds", "0,0"], "--seeds: a seed is named twice"),
    (["--eta", "abc"], "--eta"),
])
def test_bad_flags_fail_clearly_and_touch_nothing(tmp_path, capsys, flags, message):
    (tmp_path / "report.md").write_text("previous report")
    assert cli.main(["--out", str(tmp_path)] + flags) == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "report.md").read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_failed_run_keeps_the_previous_report_and_the_cached_model(base, tmp_path, monkeypatch, capsys):
    config, _, info = base
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.md").write_text("previous report")
    import otca_patch.demo.experiment as experiment

    def broken(*args, **kwargs):
        raise ValueError("rewards: simulated failure")

    monkeypatch.setattr(experiment, "run_experiment", broken)
    flags = _tiny_flags(out) + ["--base_cache", str(base_model_path(config).parent)]
    assert cli.main(flags) == 1
    assert "simulated failure" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "previous report"
    assert base_model_path(config).is_file()


def test_an_unreadable_cached_model_is_kept_and_a_new_one_trained_beside_it(tmp_path):
    config = tiny_config(out=str(tmp_path))
    path = base_model_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a checkpoint")
    messages = []
    _, info = load_or_train_base_model(config, log=messages.append)
    assert path.read_bytes() == b"not a checkpoint"
    assert info["path"] != str(path) and info["cached"] is False
    assert any("unreadable" in m for m in messages)
    _, again = load_or_train_base_model(config, log=messages.append)
    assert again["cached"] is True and again["path"] == info["path"]


def _copy(model):
    import copy

    clone = copy.deepcopy(model)
    clone.freeze_prompt_encoder()
    return clone
