"""The option ``objective_timing="probe"`` (docs/credit.md 9.3) against an independent float64
reference written here from the doc's text (plain loops; the section 1-5 quantities come from the
independent reference of ``test_credit_gapfills``, nothing from ``otca_patch.credit``), and the
conformance vectors ``tests/data/conformance/credit_timing_cases.json`` that this reference
generated (``python tests/credit/test_credit_timing_option.py --write`` rewrites them)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from test_credit_gapfills import ADV_EPS, EPS, _std, reference  # the independent sections 1-5

from conformance_vectors import assert_engine_conforms, assert_vectors_are_the_references
from otca_patch.credit import CreditConfig, compute_credit, credit_from_progress

VECTORS = Path(__file__).resolve().parents[1] / "data" / "conformance" / "credit_timing_cases.json"
TOLERANCE = 1e-5


# ----------------------------------------------------------------------------- the reference

def reference_timing_weights(decided, floor):
    """9.3 items 1-3 and 6, one objective at a time."""
    n_obj, n_steps = len(decided), len(decided[0])
    weights = [[1.0] * n_steps for _ in range(n_obj)]
    for k in range(n_obj):
        row = decided[k]
        if any(v is None or not math.isfinite(v) for v in row):
            continue  # undefined: uniform
        curve, best = [], -math.inf
        for v in row:
            best = max(best, min(max(v, 0.0), 1.0))
            curve.append(best)
        gains = [curve[t + 1] - curve[t] for t in range(n_steps - 1)] + [1.0 - curve[-1]]
        raw = [max(g, 0.0) + EPS for g in gains]
        weights[k] = [floor + (1 - floor) * n_steps * r / sum(raw) for r in raw]
    return np.array(weights)


def reference_contributions(mode, rewards, groups, expected):
    """9.3 item 4: each objective's share of the combined advantage."""
    advantages, mixture = expected["objective_advantages"], expected["mixture"]
    batch, n_obj = advantages.shape
    if mode in ("multi_grpo", "tcd"):
        return advantages.copy()
    if mode in ("moca", "otca"):
        return mixture * advantages
    out = np.zeros((batch, n_obj))
    if mode == "gdpo":
        totals = [advantages[i].sum() for i in range(batch)]
        if max(totals) == min(totals):
            return out
        spread = _std(totals)
        for k in range(n_obj):
            mean = advantages[:, k].mean()
            for i in range(batch):
                out[i, k] = (advantages[i, k] - mean) / (spread + ADV_EPS)
        return out
    assert mode == "sum"
    for g in set(groups):
        idx = [i for i in range(batch) if groups[i] == g]
        totals = [rewards[i].sum() for i in idx]
        if len(idx) < 2 or max(totals) == min(totals):
            continue
        spread = _std(totals)
        for k in range(n_obj):
            mean = sum(rewards[i, k] for i in idx) / len(idx)
            for i in idx:
                out[i, k] = (rewards[i, k] - mean) / (spread + ADV_EPS)
    return out


def reference_timed(rewards, latents, groups, mode, decided, floor):
    """``objective_step_weights``, ``combined`` and ``advantages`` under 9.3."""
    expected = reference(rewards, latents, groups, "multi_grpo" if mode == "gdpo" else mode)
    batch, n_steps = expected["step_weights"].shape
    combined = expected["combined"]
    if mode == "gdpo":
        totals = expected["objective_advantages"].sum(axis=1)
        spread = _std(list(totals))
        combined = np.zeros(batch) if totals.max() == totals.min() else (totals - totals.mean()) / (spread + ADV_EPS)
    per_step = expected["step_weights"] if mode in ("otca", "tcd") else np.ones((batch, n_steps))
    n_obj = rewards.shape[1]
    if decided is None:
        weights = np.ones((n_obj, n_steps))
        advantages = per_step * combined[:, None]
    else:
        weights = reference_timing_weights(decided, floor)
        parts = reference_contributions(mode, rewards, groups, expected)
        advantages = np.zeros((batch, n_steps))
        for i in range(batch):
            for t in range(n_steps):
                advantages[i, t] = per_step[i, t] * sum(weights[k, t] * parts[i, k] for k in range(n_obj))
    return {"objective_step_weights": weights, "combined": combined, "advantages": advantages}


def _make_case(name, seed, batch, steps, objectives, group_size, mode, decided, floor=0.5):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(batch, objectives))
    groups = [(i // group_size) * 3 + 1 for i in range(batch)]  # arbitrary labels
    sigma = np.linspace(1, 0, steps + 1)[None, :, None]
    sample, noise = rng.normal(size=(batch, 1, 5)), rng.normal(size=(batch, steps + 1, 5))
    latents = (1 - sigma) * sample + sigma * noise
    expected = reference_timed(rewards, latents, groups, mode, decided, floor)
    return {"name": name, "config": {"mode": mode, "objective_timing": "probe", "timing_floor": floor},
            "rewards": rewards.tolist(), "latents": latents.tolist(), "group_ids": groups,
            "objective_timing": decided, "expected": {k: v.tolist() for k, v in expected.items()}}


#: Maps with a known shape: early (decided at step 1), late (a jump at the last prediction, as the
#: demo's edges), gradual, non-monotone (a dip the cumulative maximum removes), undefined (None).
EARLY, LATE = [0.9, 0.95, 1.0, 1.0, 1.0], [0.02, 0.1, 0.2, 0.27, 1.0]
GRADUAL, DIP = [0.1, 0.3, 0.5, 0.8, 1.0], [0.4, 0.2, 0.5, 0.45, 0.9]
UNDEFINED = [None] * 5


def generate_cases() -> list:
    return [
        _make_case("multi_grpo_early_late_gradual", 21, 8, 5, 3, 4, "multi_grpo", [EARLY, LATE, GRADUAL]),
        _make_case("otca_early_late_gradual", 22, 8, 5, 3, 4, "otca", [EARLY, LATE, GRADUAL]),
        _make_case("tcd_dip_and_undefined", 23, 9, 5, 2, 3, "tcd", [DIP, UNDEFINED]),
        _make_case("moca_late_dip", 24, 8, 5, 2, 2, "moca", [LATE, DIP]),
        _make_case("sum_gradual_late", 25, 8, 5, 2, 4, "sum", [GRADUAL, LATE]),
        _make_case("gdpo_late_early", 26, 6, 5, 2, 3, "gdpo", [LATE, EARLY]),
        _make_case("otca_floor_zero", 27, 8, 5, 3, 4, "otca", [LATE, GRADUAL, DIP], floor=0.0),
        _make_case("multi_grpo_floor_one_is_uniform", 28, 8, 5, 2, 4, "multi_grpo", [LATE, EARLY], floor=1.0),
        _make_case("otca_not_yet_measured", 29, 8, 5, 3, 4, "otca", None),
    ]


# ----------------------------------------------------------------------------- the tests

CASES = json.loads(VECTORS.read_text()) if VECTORS.exists() else []  # (absent only while --write makes it)


def _map(case, dtype=torch.float32):
    decided = case["objective_timing"]
    if decided is None:
        return None
    return torch.tensor([[math.nan if v is None else v for v in row] for row in decided], dtype=dtype)


def _run(case, dtype=torch.float32):
    return compute_credit(torch.tensor(case["rewards"], dtype=dtype), torch.tensor(case["latents"], dtype=dtype),
                          torch.tensor(case["group_ids"]), CreditConfig(**case["config"]),
                          timing_map=_map(case, dtype))


def test_the_vectors_are_what_the_reference_computes():
    """The JSON is the reference's output (regenerated here): the engine is checked against the
    reference, not against itself."""
    assert_vectors_are_the_references(generate_cases(), CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_engine_conforms_to_the_timing_vectors(case):
    assert_engine_conforms(_run(case), case, TOLERANCE)


def test_the_late_objective_is_credited_on_a_trained_step_and_the_floor_holds():
    """LATE jumps at the last prediction: the weight goes to step T-1 (whose move made that state),
    step T keeps the floor; every objective's weights have mean 1 and none is below the floor."""
    weights = reference_timing_weights([EARLY, LATE, GRADUAL], 0.5)
    assert np.allclose(weights.mean(axis=1), 1.0, atol=1e-12)
    assert weights.min() >= 0.5 - 1e-12
    assert int(np.argmax(weights[1])) == 3 and weights[1, 4] == pytest.approx(0.5, abs=1e-5)
    # LATE's gains 0.08, 0.1, 0.07, 0.73, 0 (sum 0.98): step 4 gets 0.5 + 2.5 * 0.73 / 0.98
    assert weights[1, 3] == pytest.approx(0.5 + 2.5 * 0.73 / 0.98, abs=1e-5)
    case = next(c for c in CASES if c["name"] == "multi_grpo_early_late_gradual")
    engine = _run(case, torch.float64).objective_step_weights.double()
    assert torch.allclose(engine, torch.tensor(weights), atol=1e-6)


def test_without_a_map_or_off_the_mode_is_unchanged():
    case = CASES[1]
    rewards, latents, groups = (torch.tensor(case["rewards"]), torch.tensor(case["latents"]),
                                torch.tensor(case["group_ids"]))
    own = compute_credit(rewards, latents, groups, CreditConfig(mode="otca"))
    unmeasured = compute_credit(rewards, latents, groups, CreditConfig(mode="otca", objective_timing="probe"))
    assert torch.equal(own.advantages, unmeasured.advantages)
    assert own.objective_step_weights is None
    assert torch.equal(unmeasured.objective_step_weights, torch.ones(3, 5))
    timed = _run(case)
    assert not torch.allclose(timed.advantages, own.advantages, atol=1e-3)  # the map does change the credit


def test_credit_from_progress_takes_the_map_too():
    case = CASES[0]
    full = _run(case, torch.float64)
    again = credit_from_progress(torch.tensor(case["rewards"]), full.delta_s.double(), torch.tensor(case["group_ids"]),
                                 CreditConfig(**case["config"]), timing_map=_map(case, torch.float64))
    torch.testing.assert_close(again.advantages, full.advantages, atol=1e-6, rtol=0)


def test_objective_timing_is_a_flag():
    from otca_patch.config import parse_otca_args

    config, rest = parse_otca_args(["--otca", "--otca_objective_timing", "probe", "--otca_timing_floor", "0.3", "-x"])
    assert rest == ["-x"] and config.credit_config().objective_timing == "probe"
    assert config.credit_config().timing_floor == 0.3
    assert parse_otca_args([])[0].credit_config().objective_timing == "off"


@pytest.mark.parametrize("options, extra, message", [
    ({"objective_timing": "always"}, {}, "objective_timing: must be one of off, probe"),
    ({"objective_timing": "probe", "timing_floor": 1.5}, {}, "timing_floor: must lie in [0, 1]"),
    ({"objective_timing": "probe", "mode": "coca"}, {}, "objective_timing: probe spreads each objective's share"),
    ({}, {"timing_map": torch.ones(2, 2)}, "timing_map: a map was given but the option objective_timing is 'off'"),
    ({"objective_timing": "probe"}, {"timing_map": torch.ones(2, 3)}, "timing_map: expected a float map [K, T] = [2, 2]"),
    ({"objective_timing": "probe"}, {"timing_map": torch.full((2, 2), 1.5)},
     "timing_map: every value must lie in [0, 1] (NaN: undefined); objective 0, step 1 holds 1.5"),
    ({"objective_timing": "probe"}, {"timing_map": torch.tensor([[0.5, math.nan], [0.5, math.inf]])},
     "timing_map: every value must lie in [0, 1] (NaN: undefined); objective 1, step 2 holds inf"),
    ({"objective_timing": "probe"}, {"timing_map": torch.tensor([[-math.inf, 0.5], [0.5, 0.5]])},
     "objective 0, step 1 holds -inf"),
])
def test_bad_timing_options_and_maps_are_named(options, extra, message):
    with pytest.raises(ValueError) as info:
        compute_credit(torch.randn(4, 2), torch.randn(4, 3, 2), torch.tensor([0, 0, 1, 1]), CreditConfig(**options), **extra)
    assert message in str(info.value)


def test_a_row_with_an_undefined_step_gets_uniform_weights_and_other_rows_keep_theirs():
    """NaN is the one value outside [0, 1] a map may hold: that objective is not decided yet."""
    case = CASES[0]
    decided = _map(case, torch.float64)
    decided[0, 1] = math.nan
    credit = compute_credit(torch.tensor(case["rewards"]), torch.tensor(case["latents"]), torch.tensor(case["group_ids"]),
                            CreditConfig(**case["config"]), timing_map=decided)
    weights = reference_timing_weights([[None if math.isnan(v) else v for v in row] for row in decided.tolist()],
                                       case["config"]["timing_floor"])
    torch.testing.assert_close(credit.objective_step_weights.double(), torch.tensor(weights, dtype=torch.float64),
                               atol=1e-6, rtol=0)
    assert credit.objective_step_weights[0].tolist() == [1.0] * decided.shape[1]


if __name__ == "__main__" and "--write" in sys.argv:
    VECTORS.write_text(json.dumps(generate_cases(), indent=1) + "\n")


@pytest.mark.parametrize("options", [{"mode": m} for m in ("sum", "multi_grpo", "gdpo", "tcd", "moca", "otca")]
                         + [{"mode": "sum", "std_scope": "batch"}, {"mode": "otca", "fusion": "group"},
                            {"mode": "sum", "reward_scale": "window"}, {"mode": "multi_grpo", "objective_weights": (2, 0.5)}])
def test_a_uniform_map_keeps_each_mode_and_the_parts_add_up_to_the_combined_advantage(options):
    """With every objective decided at step 1 (no increments) the weights are 1 and the timed
    advantage is the mode's own: so each mode's parts add up to its combined advantage."""
    gen = torch.Generator().manual_seed(8)
    rewards, latents = torch.randn(12, 2, generator=gen, dtype=torch.float64), torch.randn(12, 5, 3, generator=gen)
    rewards[4:8, 1] = 0.25  # a group constant in one objective
    groups = torch.tensor([5, 5, 5, 5, 2, 2, 2, 2, 9, 9, 9, 9])
    own = compute_credit(rewards, latents, groups, CreditConfig(**options))
    timed = compute_credit(rewards, latents, groups, CreditConfig(objective_timing="probe", **options),
                           timing_map=torch.ones(2, 4, dtype=torch.float64))
    torch.testing.assert_close(timed.objective_step_weights, torch.ones(2, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(timed.advantages, own.advantages, atol=2e-5, rtol=0)
