"""The paper's baseline (``sum_raw``: raw rewards at the regime's raw scales), the ``hacking``
regime (``vividness`` can be raised past the clean render at the others' cost), the decomposition
of the ablation, the report's plain verdict lines and an ETA that ignores the start-up."""
import json
import math
import time

import pytest
import torch
from demo_fixtures import one_thread, tiny_flags  # noqa: F401 (autouse)

import otca_patch.credit
from otca_patch.demo import ablate, grpo
from otca_patch.demo.config import DemoConfig, tiny_config
from otca_patch.demo.data import clean_render, corrupted_render, sample_prompts
from otca_patch.demo.pixel_rewards import objective_rewards
from otca_patch.demo.regimes import DOMINANT_RAW_SCALE, REGIMES, regime_names
from otca_patch.analysis.intervals import mean_interval, plain_line
from otca_patch.demo.variants import VARIANTS


def test_vividness_rewards_over_saturation_that_costs_the_other_objectives():
    prompts = sample_prompts(300, torch.Generator().manual_seed(0))
    names = ("palette", "shape", "vividness")
    clean = objective_rewards(clean_render(prompts, 12), prompts, names)
    assert torch.allclose(clean, torch.ones_like(clean), atol=1e-5)
    # colours pushed towards the RGB cube's corners: vividness past the clean render, palette below it
    saturated = objective_rewards((clean_render(prompts, 12) * 1.6).clamp(-1, 1), prompts, names).mean(0)
    assert saturated[2] > 1.1 and saturated[0] < 0.95
    # a white object on black turned into pure hues: achromatic prompts gain the most, off their palette
    grey = torch.full((1, 3, 12, 12), 0.9) * 2 - 1
    hue = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1).expand(1, 3, 12, 12) * 2 - 1
    white_prompt = prompts[:1].clone()
    white_prompt[0, 0] = 6  # "white" object, and a "black" background
    white_prompt[0, 2] = 7
    rewards = objective_rewards(torch.cat([grey, hue]), white_prompt.expand(2, 4), names)
    assert rewards[1, 2] > rewards[0, 2] + 0.9 and rewards[1, 0] < rewards[0, 0]
    # washed-out colours (the fading corruption) are below the clean render on vividness
    faded = objective_rewards(corrupted_render(prompts, 12, 1.0, torch.Generator().manual_seed(1), ("fading",)),
                              prompts, names).mean(0)
    assert faded[2] < 0.9


def test_fading_is_drawn_last_so_the_other_regimes_mixtures_are_unchanged():
    prompts = sample_prompts(200, torch.Generator().manual_seed(0))
    without = corrupted_render(prompts, 12, 0.5, torch.Generator().manual_seed(5), ("colour_jitter", "misplacement"))
    with_fading = corrupted_render(prompts, 12, 0.5, torch.Generator().manual_seed(5),
                                   ("colour_jitter", "misplacement", "fading"))
    same = (without - with_fading).flatten(1).abs().max(dim=1).values < 1e-6
    assert 0.3 < same.float().mean() < 0.7  # fading hit about half of the samples, nothing else moved
    # the faded ones moved towards mid-grey (0 in [-1, 1])
    assert bool((with_fading[~same].abs().mean(dim=(1, 2, 3)) < without[~same].abs().mean(dim=(1, 2, 3))).all())


def test_every_regime_states_its_raw_scales_one_twenty_times_another():
    for regime in REGIMES.values():
        assert len(regime.raw_scales) == len(regime.objectives)
        assert max(regime.raw_scales) / min(regime.raw_scales) == pytest.approx(DOMINANT_RAW_SCALE)
    assert REGIMES["hacking"].raw_scales[REGIMES["hacking"].objectives.index("vividness")] == DOMINANT_RAW_SCALE
    assert regime_names("all") == ["conflicting", "agreeing", "hacking"]
    assert DemoConfig(regime="hacking").base_model_key() not in {DemoConfig(regime=r).base_model_key()
                                                                 for r in ("conflicting", "agreeing")}


def test_sum_raw_sums_the_raw_scaled_rewards_and_the_normalised_arms_see_unit_rewards(tmp_path, monkeypatch):
    from otca_patch.demo.evaluation import make_eval_set
    from otca_patch.demo.pretrain import build_model

    seen = []
    real = otca_patch.credit.compute_credit

    def spy(rewards, latents, group_ids, config=None, **kwargs):
        credit = real(rewards, latents, group_ids, config, **kwargs)
        seen.append((config, rewards.clone(), credit, kwargs.get("reward_window")))
        return credit

    monkeypatch.setattr(otca_patch.credit, "compute_credit", spy)
    config = tiny_config(out=str(tmp_path), regime="hacking", grpo_steps=2, prompts_per_step=2, group_size=4,
                         micro_batch=8, conflict_diagnostic=False)
    model = build_model(config)
    eval_set = make_eval_set(config, model.token_shape)
    for name in ("sum_raw", "multi_grpo", "sum_window"):
        grpo.train_mode(model, config, VARIANTS[name], 0, eval_set, [0.0] * 3)
    _, r_raw, credit_raw, _ = seen[0]  # sum_raw, iteration 0
    r_multi = seen[2][1]  # multi_grpo, iteration 0
    scales = torch.tensor(REGIMES["hacking"].raw_scales)
    batch = grpo.collect_batch(model, config, seed=0, iteration=0)
    torch.testing.assert_close(r_raw.float(), batch.rewards * scales)
    torch.testing.assert_close(r_multi.float(), batch.rewards)  # iteration 0 of multi_grpo: unit scale
    # sum_raw's advantage is the group-normalised raw sum (checked against a direct computation)
    total = (batch.rewards.double() * scales.double()).sum(1).view(2, 4)
    expected = ((total - total.mean(1, keepdim=True)) / (total.std(1, keepdim=True) + 1e-8)).flatten()
    torch.testing.assert_close(credit_raw.combined.double(), expected, atol=1e-5, rtol=0)
    # the window variant gets the earlier iterations' raw-scaled rewards (none at the first)
    windows = [w for c, _, _, w in seen if c.reward_scale == "window"]
    assert windows[0] is None and windows[1].shape == (8, 3)
    torch.testing.assert_close(windows[1].float(), batch.rewards * scales)


def _table(rows):
    return {mode: {k: mean_interval(v) for k, v in objectives.items()} for mode, objectives in rows.items()}


def test_regime_condition_needs_a_baseline_interval_below_zero():
    hurt = {"objectives": ["palette", "vividness"], "modes": ["sum_raw", "multi_grpo", "otca"],
            "table": _table({"sum_raw": {"palette": [-0.2, -0.25, -0.3], "vividness": [2.0, 2.1, 2.2]},
                             "multi_grpo": {"palette": [-0.1, 0.1, 0.0], "vividness": [1.5, 1.6, 1.7]},
                             "otca": {"palette": [-0.5, -0.6, -0.55], "vividness": [1.5, 1.6, 1.7]}})}
    assert ablate.regime_condition(hurt) == {"met": True, "hurt": {"sum_raw": ["palette"], "multi_grpo": []}}
    assert "**yes**" in ablate.regime_condition_line(hurt) and "`sum_raw` lowers palette" in ablate.regime_condition_line(hurt)
    # OTCA below the base does not count (the condition is on the baselines); a spread that reaches 0 does not either
    hurt["table"]["sum_raw"]["palette"] = mean_interval([-0.3, 0.1, -0.2])
    assert ablate.regime_condition(hurt)["met"] is False and "**no**" in ablate.regime_condition_line(hurt)
    hurt["modes"] = ["otca"]
    assert ablate.regime_condition(hurt)["met"] is None


def _diff(values, threshold):
    return mean_interval(values, threshold=threshold)


def test_plain_line_names_the_separated_objectives_and_the_drift():
    differences = {"palette": _diff([-0.030, -0.025, -0.020], 0.01), "shape": _diff([0.01, -0.01, 0.0], 0.01),
                   "edges": _diff([0.002, 0.003, 0.0025], 0.04), "drift": _diff([0.005, 0.006, 0.0055], None)}
    line = plain_line(differences, ["palette", "shape", "edges"], "OTCA", "Multi-GRPO")
    # shape's interval [-0.025, +0.025] reaches across its threshold 0.01: not decided, whatever palette says
    assert line == "OTCA vs Multi-GRPO: palette \u22120.025, shape +0.000, edges negligible, more drift \u2192 not decided at 3 seeds"
    differences["shape"] = _diff([0.001, -0.001, 0.0], 0.01)  # within the threshold: decided
    line = plain_line(differences, ["palette", "shape", "edges"], "OTCA", "Multi-GRPO")
    assert line == "OTCA vs Multi-GRPO: palette \u22120.025, shape no difference, edges negligible, more drift \u2192 no gain here (worse)"
    better = {"palette": _diff([0.05, 0.06, 0.055], 0.01), "drift": _diff([0.001, -0.001, 0.0], None)}
    assert plain_line(better, ["palette"], "A", "B") == "A vs B: palette +0.055 \u2192 a gain"


def test_the_eta_clock_starts_at_the_first_tick():
    from otca_patch.demo.progress import TickBar

    bar = TickBar(100, tiny_config(quiet=False), "GRPO")
    time.sleep(0.3)  # start-up before the first iteration: not an iteration's time
    bar.update()
    assert bar.bar.n == 1 and bar.bar.format_dict["elapsed"] < 0.3
    bar.update()
    assert bar.bar.n == 2
    bar.close()


@pytest.mark.slow
def test_tiny_hacking_ablation_has_the_decomposition_with_intervals_and_opens_with_plain_lines(tmp_path):
    flags = ["--out", str(tmp_path), "--base_cache", str(tmp_path), "--regime", "hacking",
             "--modes", "sum_raw,multi_grpo,moca,otca", "--seeds", "0,1"] + tiny_flags()
    assert ablate.main(flags) == 0
    result = json.loads((tmp_path / "ablation.json").read_text())
    assert result["regime"] == "hacking" and result["objectives"] == ["palette", "shape", "vividness"]
    steps = [(row["from"], row["to"]) for row in result["decomposition"]]
    assert steps == [("sum_raw", "multi_grpo"), ("multi_grpo", "moca"), ("moca", "otca"), ("sum_raw", "otca"),
                     ("multi_grpo", "otca")]
    by = {(r["mode"], r["seed"]): r for r in result["runs"]}
    for row in result["decomposition"]:
        for name in result["objectives"]:
            stat = row["differences"][name]
            assert math.isfinite(stat["low"]) and math.isfinite(stat["high"]) and stat["n"] == 2
            # paired by seed, recomputed from the runs themselves
            values = [by[row["to"], s]["gap_closed"][name] - by[row["from"], s]["gap_closed"][name] for s in (0, 1)]
            assert stat["values"] == pytest.approx(values, abs=1e-12)
    # the regime's condition, recomputed from the runs: the 95% t-interval's upper end (2 seeds: t = 12.706)
    for mode in ("sum_raw", "multi_grpo"):
        expected = []
        for name in result["objectives"]:
            values = [by[mode, s]["gap_closed"][name] for s in (0, 1)]
            mean, sd = sum(values) / 2, abs(values[0] - values[1]) / math.sqrt(2)
            if mean + 12.706 * sd / math.sqrt(2) < 0:
                expected.append(name)
        assert result["regime_condition"]["hurt"][mode] == expected
    assert result["regime_condition"]["met"] == any(result["regime_condition"]["hurt"].values())
    lines = (tmp_path / "ablation.md").read_text().splitlines()
    assert any(line.startswith("- Objectives fight: **") for line in lines[2:14])
    assert lines[2].startswith("- Multi-GRPO vs DanceGRPO (raw sum): palette ")
    assert any(line.startswith("- OTCA vs DanceGRPO (raw sum): ") for line in lines[2:8])
    assert "| `otca` - `sum_raw` |" in "\n".join(lines) and "| `multi_grpo` - `sum_raw` |" in "\n".join(lines)
