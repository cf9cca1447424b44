"""The options that test OTCA's two gap-fills (docs/credit.md 2.1 ``reward_scale`` and 3.8
``explore_scale``) against an independent float64 reference written here from the spec's text (plain
loops over samples, steps and groups; nothing imported from ``otca_patch.credit``), and the
conformance vectors ``tests/data/conformance/credit_gapfill_cases.json`` that this reference
generated (``python tests/credit/test_credit_gapfills.py --write`` rewrites them)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from otca_patch.credit import CreditConfig, compute_credit, credit_from_progress

VECTORS = Path(__file__).resolve().parents[1] / "data" / "conformance" / "credit_gapfill_cases.json"
TOLERANCE = 1e-5
EPS, ADV_EPS, W_MIN, TIE = 1e-6, 1e-8, 0.5, 1e-6


# ----------------------------------------------------------------------------- the reference

def _std(values):
    """Unbiased std of a list (0 for fewer than two values)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def reference(rewards, latents, groups, mode, explore_scale="absolute", reward_scale="group", window=None,
              explore=1.0):
    """Every section-6 quantity, step by step from docs/credit.md (sections 1-5, 2.1, 3.8)."""
    batch, n_states = latents.shape[0], latents.shape[1]
    n_steps, n_obj = n_states - 1, rewards.shape[1]
    similarity = np.zeros((batch, n_states))
    for i in range(batch):
        final = latents[i, -1].ravel()
        for t in range(n_states):
            z = latents[i, t].ravel()
            similarity[i, t] = float(z @ final) / max(np.linalg.norm(z) * np.linalg.norm(final), 1e-12)
    delta = similarity[:, 1:] - similarity[:, :-1]
    share = np.zeros_like(delta)
    for i in range(batch):
        raw = [max(0.0, delta[i, t]) + EPS for t in range(n_steps)]
        share[i] = [r / sum(raw) for r in raw]
    weights = W_MIN + (1 - W_MIN) * n_steps * share
    members = {g: [i for i in range(batch) if groups[i] == g] for g in set(groups)}

    # section 2 / 2.1: the objective advantages (and the rewards that mode sum adds up)
    summed_rewards = rewards.copy()
    advantages = np.zeros((batch, n_obj))
    if reward_scale == "window":
        pool = rewards if window is None else np.concatenate([window, rewards])
        for k in range(n_obj):
            spread = _std(list(pool[:, k]))
            scale = spread if spread > 0 else 1.0
            summed_rewards[:, k] = rewards[:, k] / scale
        for g, idx in members.items():
            for k in range(n_obj):
                mean = sum(summed_rewards[i, k] for i in idx) / len(idx)
                for i in idx:
                    advantages[i, k] = summed_rewards[i, k] - mean
    else:
        for g, idx in members.items():
            for k in range(n_obj):
                values = [rewards[i, k] for i in idx]
                if len(idx) < 2 or max(values) == min(values):
                    continue
                mean, spread = sum(values) / len(values), _std(values)
                for i in idx:
                    advantages[i, k] = (rewards[i, k] - mean) / (spread + ADV_EPS)

    # section 3 with 3.8: the exploration bias and the per-sample min-norm fusion
    score = (share * delta).sum(axis=1)
    lambdas = np.zeros(batch)
    for g, idx in members.items():
        spread = _std([score[i] for i in idx])
        for i in idx:
            if advantages[i].mean() > 0:
                bias = explore * math.tanh(abs(score[i]) / (spread + EPS))
                lambdas[i] = bias * advantages[i].max() if explore_scale == "max_advantage" else bias
    fused, mixture = np.zeros(batch), np.zeros((batch, n_obj))
    for i in range(batch):
        low, high = advantages[i].min(), advantages[i].max()
        fused[i] = min(max(lambdas[i] / 2, low), high)
        if high - low <= TIE:
            mixture[i] = 1.0 / n_obj
        else:
            alpha = (fused[i] - low) / (high - low)
            mixture[i, int(np.argmin(advantages[i]))] += 1 - alpha
            mixture[i, int(np.argmax(advantages[i]))] += alpha

    # section 5: the mode's combined advantage and its spread over steps
    if mode == "sum":
        total = summed_rewards.sum(axis=1)
        combined = np.zeros(batch)
        for g, idx in members.items():
            values = [total[i] for i in idx]
            if len(idx) < 2 or max(values) == min(values):
                continue
            mean, spread = sum(values) / len(values), _std(values)
            for i in idx:
                combined[i] = (total[i] - mean) / (spread + ADV_EPS)
    elif mode in ("multi_grpo", "tcd"):
        combined = advantages.sum(axis=1)
    else:
        combined = fused
    per_step = weights if mode in ("otca", "tcd") else np.ones_like(weights)
    return {"similarity": similarity, "delta_s": delta, "step_share": share, "step_weights": weights,
            "objective_advantages": advantages, "trajectory_score": score, "lambdas": lambdas, "mixture": mixture,
            "combined": combined, "advantages": per_step * combined[:, None]}


def _make_case(name, seed, batch, steps, objectives, group_size, mode, scales=None, window_batches=0, **options):
    rng = np.random.default_rng(seed)
    scales = np.ones(objectives) if scales is None else np.asarray(scales, dtype=float)
    rewards = rng.normal(size=(batch, objectives)) * scales
    groups = [(i // group_size) * 5 - 2 for i in range(batch)]  # arbitrary labels
    sigma = np.linspace(1, 0, steps + 1)[None, :, None]
    sample, noise = rng.normal(size=(batch, 1, 6)), rng.normal(size=(batch, steps + 1, 6))
    latents = (1 - sigma) * sample + sigma * noise
    window = rng.normal(size=(window_batches * batch, objectives)) * scales if window_batches else None
    expected = reference(rewards, latents, groups, mode, window=window, **options)
    case = {"name": name, "config": {"mode": mode, **options}, "rewards": rewards.tolist(),
            "latents": latents.tolist(), "group_ids": groups,
            "expected": {k: v.tolist() for k, v in expected.items()}}
    if window is not None:
        case["reward_window"] = window.tolist()
    return case


def generate_cases() -> list:
    return [
        _make_case("maxadv_otca", 11, 8, 6, 3, 4, "otca", explore_scale="max_advantage"),
        _make_case("maxadv_moca_two_objectives", 12, 9, 5, 2, 3, "moca", explore_scale="max_advantage"),
        _make_case("maxadv_beta_half", 13, 8, 4, 3, 2, "otca", explore_scale="max_advantage", explore=0.5),
        _make_case("window_otca_raw_scales", 14, 8, 6, 3, 4, "otca", scales=[1.0, 1.0, 20.0], window_batches=2,
                   reward_scale="window"),
        _make_case("window_sum_raw_scales", 15, 8, 5, 3, 4, "sum", scales=[1.0, 20.0, 1.0], window_batches=3,
                   reward_scale="window"),
        _make_case("window_multi_grpo_no_history", 16, 6, 4, 2, 3, "multi_grpo", scales=[0.05, 1.0],
                   reward_scale="window"),
        _make_case("window_and_maxadv", 17, 8, 6, 3, 4, "otca", scales=[20.0, 1.0, 1.0], window_batches=1,
                   reward_scale="window", explore_scale="max_advantage"),
    ]


# ----------------------------------------------------------------------------- the tests

CASES = json.loads(VECTORS.read_text()) if VECTORS.exists() else []  # (absent only while --write makes it)


def _run(case, dtype=torch.float32):
    window = case.get("reward_window")
    return compute_credit(torch.tensor(case["rewards"], dtype=dtype), torch.tensor(case["latents"], dtype=dtype),
                          torch.tensor(case["group_ids"]), CreditConfig(**case["config"]),
                          reward_window=None if window is None else torch.tensor(window, dtype=dtype))


def test_the_vectors_are_what_the_reference_computes():
    """The JSON is the reference's output (regenerated here): the engine is checked against the
    reference, not against itself."""
    regenerated = json.loads(json.dumps(generate_cases()))
    assert [c["name"] for c in regenerated] == [c["name"] for c in CASES]
    for new, stored in zip(regenerated, CASES):
        for name, values in new["expected"].items():
            assert np.allclose(values, stored["expected"][name], atol=1e-12, rtol=0), (new["name"], name)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_engine_conforms_to_the_gapfill_vectors(case):
    credit = _run(case)
    for name, values in case["expected"].items():
        expected = torch.tensor(values, dtype=torch.float64)
        got = getattr(credit, name).double()
        assert got.shape == expected.shape, name
        assert (got - expected).abs().max() < TOLERANCE, (case["name"], name)


def test_the_defaults_are_unchanged_and_the_options_do_change_something():
    case = CASES[0]
    rewards, latents = torch.tensor(case["rewards"]), torch.tensor(case["latents"])
    groups = torch.tensor(case["group_ids"])
    default = compute_credit(rewards, latents, groups, CreditConfig())
    explicit = compute_credit(rewards, latents, groups, CreditConfig(explore_scale="absolute", reward_scale="group"))
    assert torch.equal(default.combined, explicit.combined)
    scaled = compute_credit(rewards, latents, groups, CreditConfig(explore_scale="max_advantage"))
    positive = default.lambdas > 0
    assert bool(positive.any())
    # the bias now carries each positive sample's largest advantage (not one value for all)
    torch.testing.assert_close(scaled.lambdas[positive],
                               default.lambdas[positive] * default.objective_advantages[positive].max(dim=-1).values,
                               atol=1e-6, rtol=1e-6)


def test_window_scale_is_per_objective_scale_free_and_keeps_the_group_baseline():
    """Multiplying one objective's raw rewards (and its window) by 20 leaves every advantage unchanged;
    each group's advantages still sum to 0 per objective."""
    gen = torch.Generator().manual_seed(3)
    rewards, window = torch.randn(12, 3, generator=gen, dtype=torch.float64), torch.randn(24, 3, generator=gen, dtype=torch.float64)
    latents, groups = torch.randn(12, 5, 4, generator=gen), torch.arange(12) // 4
    config = CreditConfig(mode="otca", reward_scale="window")
    scale = torch.tensor([1.0, 20.0, 1.0], dtype=torch.float64)
    plain = compute_credit(rewards, latents, groups, config, reward_window=window)
    scaled = compute_credit(rewards * scale, latents, groups, config, reward_window=window * scale)
    torch.testing.assert_close(plain.objective_advantages, scaled.objective_advantages, atol=1e-5, rtol=1e-5)
    sums = torch.zeros(3, 3, dtype=torch.float64).index_add_(0, groups, plain.objective_advantages.double())
    assert sums.abs().max() < 1e-5
    # ... but, unlike the group std, the window keeps a low-spread group's advantages small
    group_std = compute_credit(rewards, latents, groups, CreditConfig(mode="otca"))
    assert not torch.allclose(group_std.objective_advantages, plain.objective_advantages, atol=1e-3)


def test_credit_from_progress_takes_the_window_too():
    case = next(c for c in CASES if "reward_window" in c)
    full = _run(case, torch.float64)
    again = credit_from_progress(torch.tensor(case["rewards"]), full.delta_s.double(), torch.tensor(case["group_ids"]),
                                 CreditConfig(**case["config"]), reward_window=torch.tensor(case["reward_window"]))
    torch.testing.assert_close(again.advantages, full.advantages, atol=1e-6, rtol=0)


def test_explore_scale_is_an_otca_flag_and_reward_scale_is_not():
    from otca_patch.config import parse_otca_args

    config, rest = parse_otca_args(["--otca", "--otca_explore_scale", "max_advantage", "--lr", "1"])
    assert rest == ["--lr", "1"] and config.credit_config().explore_scale == "max_advantage"
    assert parse_otca_args(config.to_argv())[0] == config
    assert parse_otca_args([])[0].credit_config().explore_scale == "absolute"
    with pytest.raises(ValueError, match="otca_reward_scale"):  # needs a window of rewards no hook keeps yet
        parse_otca_args(["--otca_reward_scale", "window"])


@pytest.mark.parametrize("options, extra, message", [
    ({"explore_scale": "largest"}, {}, "explore_scale: must be one of absolute, max_advantage"),
    ({"reward_scale": "running"}, {}, "reward_scale: must be one of group, window"),
    ({"reward_scale": "window", "std_scope": "batch"}, {}, "reward_scale: window sets every objective's scale"),
    ({}, {"reward_window": torch.zeros(4, 2)}, "reward_window: only reward_scale='window' uses it"),
    ({"reward_scale": "window"}, {"reward_window": torch.zeros(4, 3)}, "reward_window: expected a [N, K] tensor with K = 2"),
    ({"reward_scale": "window"}, {"reward_window": torch.full((4, 2), float("nan"))}, "reward_window: non-finite value"),
])
def test_bad_gapfill_options_and_inputs_are_named(options, extra, message):
    with pytest.raises(ValueError) as info:
        compute_credit(torch.randn(4, 2), torch.randn(4, 3, 2), torch.tensor([0, 0, 1, 1]), CreditConfig(**options), **extra)
    assert message in str(info.value)


if __name__ == "__main__" and "--write" in sys.argv:
    VECTORS.write_text(json.dumps(generate_cases(), indent=1) + "\n")
