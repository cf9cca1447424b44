"""The comparison methods of the credit engine (docs/credit.md section 8): CoCA's and TempFlow-GRPO's
step credit against an independent float64 reference written here from the spec's text (loops over
samples, steps and groups; nothing imported from ``otca_patch.credit``), and the conformance vectors
``tests/data/conformance/credit_peer_cases.json`` that this reference generated
(``python tests/credit/test_credit_peers.py --write`` rewrites them)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from otca_patch.credit import MODES, PEER_MODES, CreditConfig, compute_credit, credit_from_progress

VECTORS = Path(__file__).resolve().parents[1] / "data" / "conformance" / "credit_peer_cases.json"
TOLERANCE = 1e-5


# ----------------------------------------------------------------------------- the reference

def _cos(a, b):
    a, b = np.ravel(a), np.ravel(b)
    denominator = max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)
    return float(a @ b) / denominator


def _group_advantages(rewards, groups):
    """Per objective ``(r - mean_g) / (std_g(unbiased) + 1e-8)``; constant groups and groups of one give 0."""
    out = np.zeros_like(rewards)
    for g in set(groups):
        members = [i for i in range(len(groups)) if groups[i] == g]
        for k in range(rewards.shape[1]):
            values = rewards[members, k]
            if len(members) < 2 or values.max() == values.min():
                continue
            std = values.std(ddof=1)
            for i in members:
                out[i, k] = (rewards[i, k] - values.mean()) / (std + 1e-8)
    return out


def reference_coca(rewards, clean, groups, alpha, window, eps=1e-6):
    """Spec 8.1 step by step: ``(contributions [B][T], shaping [B][T], advantages [B][T])``."""
    combined = _group_advantages(rewards, groups).sum(axis=1)
    batch, n_states = clean.shape[0], clean.shape[1]
    n_steps = n_states - 1
    contributions = np.zeros((batch, n_steps))
    for i in range(batch):
        c = [_cos(clean[i, t], clean[i, -1]) for t in range(n_states)]
        window_means = [np.mean(c[1 + j * window:1 + (j + 1) * window]) for j in range(n_steps // window)]
        gains = [window_means[0] - c[0]] + [window_means[j] - window_means[j - 1] for j in range(1, len(window_means))]
        total = sum(gains)
        for t in range(n_steps):
            contributions[i, t] = 1.0 / n_steps if abs(total) <= eps else gains[t // window] / (total * window)
    shaping = np.zeros_like(contributions)
    for i in range(batch):
        for t in range(n_steps):
            shaping[i, t] = alpha + (1 - alpha) * contributions[i, t:].sum()
    shaped = combined[:, None] * shaping
    advantages = np.zeros_like(shaped)
    for g in set(groups):
        members = [i for i in range(batch) if groups[i] == g]
        values = shaped[members]
        advantages[members] = (values - values.mean()) / (values.std() + 1e-6)  # population std over (sample, step)
    return contributions, shaping, advantages


def reference_tempflow(rewards, step_noise, groups):
    """Spec 8.2: ``(weights [B][T], advantages [B][T])``."""
    combined = _group_advantages(rewards, groups).sum(axis=1)
    noise = np.broadcast_to(step_noise, (len(groups), step_noise.shape[-1]))
    weights = noise / noise.mean(axis=1, keepdims=True)
    return weights, combined[:, None] * weights


def _make_case(name, seed, batch, steps, objectives, group_size, mode, alpha=0.0, window=1, per_sample_noise=False):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(batch, objectives))
    groups = [i // group_size for i in range(batch)]
    latents = rng.normal(size=(batch, steps + 1, 6))
    case = {"name": name, "config": {"mode": mode, "coca_alpha": alpha, "coca_window": window},
            "rewards": rewards.tolist(), "latents": latents.tolist(), "group_ids": groups}
    if mode == "coca":
        # predicted clean samples drifting towards the final sample, with noise: uneven contributions
        final = rng.normal(size=6)
        clean = np.stack([[(t / steps) * final + (1 - t / steps) * rng.normal(size=6) for t in range(steps)] + [final]
                          for _ in range(batch)])
        contributions, shaping, advantages = reference_coca(rewards, clean, groups, alpha, window)
        case["clean"] = clean.tolist()
        case["expected"] = {"step_contributions": contributions.tolist(), "step_weights": shaping.tolist(),
                            "advantages": advantages.tolist()}
    else:
        noise = rng.uniform(0.05, 0.6, size=(batch, steps) if per_sample_noise else (steps,))
        weights, advantages = reference_tempflow(rewards, noise, groups)
        case["step_noise"] = noise.tolist()
        case["expected"] = {"step_weights": weights.tolist(), "advantages": advantages.tolist()}
    return case


def generate_cases() -> list:
    return [
        _make_case("coca_window1", 1, 8, 6, 3, 4, "coca"),
        _make_case("coca_window2_alpha", 2, 6, 8, 2, 3, "coca", alpha=0.3, window=2),
        _make_case("coca_window4_one_objective", 3, 8, 8, 1, 4, "coca", window=4),
        _make_case("tempflow_schedule", 4, 8, 6, 3, 4, "tempflow"),
        _make_case("tempflow_per_sample", 5, 6, 5, 2, 2, "tempflow", per_sample_noise=True),
    ]


# ----------------------------------------------------------------------------- the tests

CASES = json.loads(VECTORS.read_text()) if VECTORS.exists() else []  # (absent only while --write makes it)


def _run(case, dtype=torch.float32):
    config = CreditConfig(**case["config"])
    extra = ({"clean": torch.tensor(case["clean"], dtype=dtype)} if "clean" in case
             else {"step_noise": torch.tensor(case["step_noise"], dtype=dtype)})
    return compute_credit(torch.tensor(case["rewards"], dtype=dtype), torch.tensor(case["latents"], dtype=dtype),
                          torch.tensor(case["group_ids"]), config, **extra)


#: how far the float64 reference may move between machines when it is regenerated: numpy's BLAS
#: picks another kernel on another CPU (1.1e-15 measured on an AMD EPYC), far below TOLERANCE
REGENERATION_TOLERANCE = 1e-12


def _differences(got, stored, where="cases") -> list:
    """Where ``got`` differs from ``stored``: structure, names and integers exactly, floats within
    REGENERATION_TOLERANCE (absolute, or relative to the stored value)."""
    if isinstance(stored, dict) and isinstance(got, dict):
        if set(got) != set(stored):
            return [f"{where}: keys {sorted(got)} != {sorted(stored)}"]
        return [d for key in stored for d in _differences(got[key], stored[key], f"{where}.{key}")]
    if isinstance(stored, list) and isinstance(got, list):
        if len(got) != len(stored):
            return [f"{where}: length {len(got)} != {len(stored)}"]
        return [d for i, (a, b) in enumerate(zip(got, stored)) for d in _differences(a, b, f"{where}[{i}]")]
    if isinstance(stored, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        close = math.isclose(got, stored, rel_tol=REGENERATION_TOLERANCE, abs_tol=REGENERATION_TOLERANCE)
        return [] if close else [f"{where}: {got!r} != {stored!r}"]
    return [] if type(got) is type(stored) and got == stored else [f"{where}: {got!r} != {stored!r}"]


def test_the_vectors_are_what_the_reference_computes():
    """The JSON is the reference's output (regenerated here), so the engine is checked against the
    reference, not against itself."""
    differences = _differences(json.loads(json.dumps(generate_cases())), CASES)
    assert not differences, differences[:10]


def test_the_regeneration_check_sees_a_changed_vector():
    changed = json.loads(json.dumps(CASES))
    changed[0]["expected"]["advantages"][1][2] += 1e-9
    assert _differences(changed, CASES) == [f"cases[0].expected.advantages[1][2]: "
                                             f"{changed[0]['expected']['advantages'][1][2]!r} != "
                                             f"{CASES[0]['expected']['advantages'][1][2]!r}"]
    changed[0]["expected"]["advantages"][1][2] = CASES[0]["expected"]["advantages"][1][2] + 1e-16
    changed[1]["name"] = "renamed"
    assert len(_differences(changed, CASES)) == 1


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_engine_conforms_to_the_peer_vectors(case):
    credit = _run(case)
    for name in ("step_weights", "advantages"):
        expected = torch.tensor(case["expected"][name], dtype=torch.float64)
        assert getattr(credit, name).shape == expected.shape
        assert (getattr(credit, name).double() - expected).abs().max() < TOLERANCE, name


def test_coca_contributions_sum_to_one_and_shaping_starts_at_one():
    case = CASES[0]
    expected = np.array(case["expected"]["step_contributions"])
    assert np.allclose(expected.sum(axis=1), 1.0)
    shaping = _run(case).step_weights
    assert torch.allclose(shaping[:, 0], torch.ones(shaping.shape[0]), atol=1e-6)  # R[:, 0] = 1 (alpha = 0)
    # re-standardised per group over (sample, step): mean 0, population std 1
    advantages = _run(case).advantages.double()
    for g in set(case["group_ids"]):
        members = torch.tensor([i for i, x in enumerate(case["group_ids"]) if x == g])
        values = advantages[members]
        assert abs(float(values.mean())) < 1e-5 and abs(float(values.std(correction=0)) - 1) < 1e-4


def test_coca_differs_from_multi_grpo_only_by_its_step_credit():
    """With every contribution on the last step (x0-hat reaches the final sample only at the end: the
    reverse cumulative sum R is 1 at every step) CoCA is Multi-GRPO's advantage re-standardised."""
    rng = np.random.default_rng(7)
    rewards = torch.tensor(rng.normal(size=(4, 2)))
    final = torch.tensor(rng.normal(size=5))
    clean = torch.stack([torch.stack([torch.tensor(rng.normal(size=5))] * 3 + [final]) for _ in range(4)])
    latents = torch.tensor(rng.normal(size=(4, 4, 5)))
    groups = torch.tensor([0, 0, 0, 0])
    coca = compute_credit(rewards, latents, groups, CreditConfig(mode="coca"), clean=clean)
    multi = compute_credit(rewards, latents, groups, CreditConfig(mode="multi_grpo")).combined.double()
    standardised = (multi - multi.mean()) / (multi.std(correction=0) + 1e-6)
    assert torch.allclose(coca.advantages.double(), standardised.unsqueeze(1).expand(4, 3), atol=1e-5)


def test_tempflow_weights_follow_the_noise_and_average_one():
    case = next(c for c in CASES if c["name"] == "tempflow_schedule")
    credit = _run(case)
    noise = torch.tensor(case["step_noise"])
    assert torch.allclose(credit.step_weights.mean(dim=1), torch.ones(8), atol=1e-6)
    assert torch.equal(credit.step_weights[0].argsort(), noise.argsort())  # the noisiest step weighs most
    # credit_from_progress accepts the same input
    again = credit_from_progress(torch.tensor(case["rewards"]), credit.delta_s, torch.tensor(case["group_ids"]),
                                 CreditConfig(mode="tempflow"), step_noise=noise)
    assert torch.allclose(again.advantages, credit.advantages, atol=1e-6)


def test_defaults_and_the_trainer_modes_are_unchanged():
    assert CreditConfig().mode == "otca" and CreditConfig().coca_alpha == 0.0 and CreditConfig().coca_window == 1
    assert set(PEER_MODES) == {"coca", "tempflow"} and not set(PEER_MODES) & set(MODES)
    from otca_patch.config import OtcaConfig
    from dataclasses import fields

    choices = next(f for f in fields(OtcaConfig) if f.name == "otca_mode").metadata["choices"]
    assert "coca" not in choices and "tempflow" not in choices  # no trainer hook feeds their inputs yet


@pytest.mark.parametrize("config, extra, message", [
    (dict(mode="coca"), {}, "clean: mode coca needs"),
    (dict(mode="coca", coca_window=4), {"clean": torch.ones(2, 7, 3)}, "coca_window: 4 does not divide the 6"),
    (dict(mode="tempflow"), {}, "step_noise: mode tempflow needs"),
    (dict(mode="tempflow"), {"step_noise": torch.tensor([0.1, 0.2, 0.0, 0.1, 0.1, 0.1])}, "must be > 0"),
    (dict(mode="otca"), {"clean": torch.ones(2, 7, 3)}, "clean: only mode coca"),
    (dict(mode="multi_grpo"), {"step_noise": torch.ones(6)}, "step_noise: only mode tempflow"),
])
def test_bad_peer_inputs_are_named(config, extra, message):
    with pytest.raises(ValueError, match=message):
        compute_credit(torch.rand(2, 2), torch.rand(2, 7, 3), torch.tensor([0, 0]), CreditConfig(**config), **extra)


@pytest.mark.parametrize("field, value", [("coca_alpha", 1.5), ("coca_alpha", math.nan), ("coca_window", 0),
                                          ("mode", "cocaa")])
def test_bad_peer_options_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        CreditConfig(**{field: value})


if __name__ == "__main__" and "--write" in sys.argv:
    VECTORS.write_text(json.dumps(generate_cases(), indent=1) + "\n")
    print(f"wrote {VECTORS}")
