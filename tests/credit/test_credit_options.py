"""The credit options of spec 1.6 (``weight_scope``), 3.6 (``explore_center``), 3.7 (``fusion``) and
the group-size check of ``std_correction``; every reference is computed independently here."""
from __future__ import annotations

import itertools
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otca_patch.config import parse_otca_args
from otca_patch.credit import CreditConfig, compute_credit, credit_from_progress
from otca_patch.credit.simplex_qp import ENUMERATE_MAX_K, minimize_on_simplex

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNCHANGED_BY_OPTIONS = ("similarity", "delta_s", "step_share", "objective_advantages", "trajectory_score")


@st.composite
def batches(draw, min_objectives=1, max_objectives=4, min_group=1):
    """rewards float64 [B, K], latents float32 [B, T+1, D], group_ids int64 [B] (shuffled groups)."""
    sizes = draw(st.lists(st.integers(min_group, 6), min_size=1, max_size=4))
    k = draw(st.integers(min_objectives, max_objectives))
    steps, dim, seed = draw(st.integers(1, 6)), draw(st.integers(1, 8)), draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    group_ids = torch.tensor([g * 7 - 3 for g, n in enumerate(sizes) for _ in range(n)])
    group_ids = group_ids[torch.randperm(group_ids.shape[0], generator=gen)]
    batch = group_ids.shape[0]
    rewards = torch.randn(batch, k, generator=gen, dtype=torch.float64) * 2 + 1
    sigma = torch.linspace(1, 0, steps + 1).view(1, -1, 1)
    sample, noise = torch.randn(batch, 1, dim, generator=gen), torch.randn(batch, steps + 1, dim, generator=gen)
    latents = (1 - sigma) * sample + sigma * noise + 0.3 * sigma * (1 - sigma) * torch.randn(batch, steps + 1, dim, generator=gen)
    return rewards, latents, group_ids


def run(data, **options):
    return compute_credit(*data, CreditConfig(**options))


# ----------------------------------------------------------------------------- weight_scope (1.6)


@SETTINGS
@given(data=batches(), w_min=st.floats(0, 1), mode=st.sampled_from(["otca", "tcd"]))
def test_batch_weight_scope_gives_every_sample_the_batch_schedule(data, w_min, mode):
    per_sample = run(data, mode=mode, w_min=w_min)
    batch = run(data, mode=mode, w_min=w_min, weight_scope="batch")
    weights = batch.step_weights.double()
    assert torch.equal(batch.step_weights, batch.step_weights[:1].expand_as(batch.step_weights))
    n_steps = weights.shape[1]
    expected = w_min + (1 - w_min) * n_steps * per_sample.step_share.double().mean(dim=0)
    torch.testing.assert_close(weights[0], expected, atol=1e-6, rtol=0)
    for name in UNCHANGED_BY_OPTIONS + ("lambdas", "mixture", "combined"):  # q keeps per-sample p
        torch.testing.assert_close(getattr(batch, name), getattr(per_sample, name), atol=0, rtol=0, msg=name)
    torch.testing.assert_close(batch.advantages.double(), weights * batch.combined.double().unsqueeze(1),
                               atol=1e-6, rtol=1e-6)


# ----------------------------------------------------------------------------- explore_center (3.6)


def reference_centred_lambdas(score, advantages, group_ids, beta, eps=1e-6):
    out = torch.zeros_like(score)
    for label in group_ids.unique():
        members = group_ids == label
        q = score[members]
        spread = q.std() if q.numel() > 1 else torch.zeros(())
        strength = (q - q.mean()).abs() / (spread + eps)
        out[members] = torch.where(advantages[members].mean(-1) > 0, beta * torch.tanh(strength), torch.zeros_like(q))
    return out


@SETTINGS
@given(data=batches(), beta=st.floats(0, 3), mode=st.sampled_from(["otca", "moca", "tcd"]))
def test_explore_center_changes_only_the_lambdas(data, beta, mode):
    plain = run(data, mode=mode, explore=beta)
    centred = run(data, mode=mode, explore=beta, explore_center=True)
    for name in UNCHANGED_BY_OPTIONS + ("step_weights",):
        torch.testing.assert_close(getattr(centred, name), getattr(plain, name), atol=0, rtol=0, msg=name)
    # q from the float32 similarity in float64 (as the engine does: a rounded q would move |q - mean|)
    delta_s = plain.similarity.double().diff(dim=1)
    share = (delta_s.clamp(min=0) + 1e-6) / (delta_s.clamp(min=0) + 1e-6).sum(dim=1, keepdim=True)
    expected = reference_centred_lambdas((share * delta_s).sum(dim=1), plain.objective_advantages.double(),
                                         data[2], beta)
    decided = plain.objective_advantages.double().mean(-1).abs() > 1e-5  # mean_k A's sign survives rounding
    torch.testing.assert_close(centred.lambdas.double()[decided], expected[decided], atol=1e-5, rtol=0)
    # combined follows from the new lambdas by the per-sample rule: clip(lambda / 2, min_k A, max_k A)
    adv = centred.objective_advantages.double()
    clipped = torch.minimum(torch.maximum(centred.lambdas.double() / 2, adv.min(-1).values), adv.max(-1).values)
    if mode != "tcd":
        torch.testing.assert_close(centred.combined.double(), clipped, atol=1e-5, rtol=0)
    if beta == 0:
        torch.testing.assert_close(centred.advantages, plain.advantages, atol=0, rtol=0)


# ----------------------------------------------------------------------------- fusion=group (3.7)


@SETTINGS
@given(data=batches(min_objectives=2, max_objectives=7), beta=st.floats(0, 5), mode=st.sampled_from(["otca", "moca"]),
       center=st.booleans())
def test_group_fusion_keeps_each_groups_combined_zero_mean(data, beta, mode, center):
    credit = run(data, mode=mode, explore=beta, explore_center=center, fusion="group")
    group_ids = data[2]
    for label in group_ids.unique():
        members = group_ids == label
        assert abs(float(credit.combined[members].double().mean())) < 1e-5
        # one mixture per group, on the simplex, reproducing combined
        mixture = credit.mixture[members].double()
        assert torch.equal(credit.mixture[members], credit.mixture[members][:1].expand_as(credit.mixture[members]))
        assert float(mixture.min()) >= 0 and abs(float(mixture[0].sum()) - 1) < 1e-6
    reproduced = (credit.mixture.double() * credit.objective_advantages.double()).sum(-1)
    torch.testing.assert_close(credit.combined.double(), reproduced, atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed", range(5))
def test_group_fusion_of_two_equal_norm_columns_without_bias_is_their_average(seed):
    gen = torch.Generator().manual_seed(seed)
    n = 6
    first, second = torch.randn(n, generator=gen, dtype=torch.float64), torch.randn(n, generator=gen, dtype=torch.float64)
    first, second = first - first.mean(), second - second.mean()
    second = second * first.norm() / second.norm()  # equal norms, zero mean (as group advantages are)
    rewards = torch.stack([first, second], dim=1) * 0.7 + 2.0
    latents = torch.randn(n, 4, 5, generator=gen)
    credit = compute_credit(rewards, latents, [0] * n, CreditConfig(mode="moca", explore=0.0, fusion="group"))
    adv = credit.objective_advantages.double()
    torch.testing.assert_close(credit.combined.double(), adv.mean(dim=1), atol=1e-6, rtol=0)
    torch.testing.assert_close(credit.mixture.double(), torch.full((n, 2), 0.5, dtype=torch.float64), atol=1e-6, rtol=0)


def test_group_fusion_of_a_single_objective_is_its_advantage():
    data = (torch.randn(8, 1, dtype=torch.float64), torch.randn(8, 4, 3), torch.tensor([0] * 4 + [1] * 4))
    group = run(data, fusion="group")
    torch.testing.assert_close(group.combined, group.objective_advantages[:, 0], atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- the simplex QP is exact


def problem(seed, k, n=6, bias=1.0, duplicate=False):
    """M = A^T A, b = A^T lambda for a zero-mean [n, K] advantage matrix, as group fusion builds them."""
    gen = torch.Generator().manual_seed(seed)
    advantages = torch.randn(n, k, generator=gen, dtype=torch.float64)
    if duplicate:
        advantages[:, -1] = advantages[:, 0]  # singular: c is not unique, A c is
    advantages = advantages - advantages.mean(0)
    lambdas = bias * torch.rand(n, generator=gen, dtype=torch.float64)
    return advantages, lambdas


def value(advantages, lambdas, c):
    """The objective in its own form: |A c|^2 - lambda^T A c."""
    y = advantages @ c
    return float(y @ y - lambdas @ y)


def solve(advantages, lambdas):
    return minimize_on_simplex((advantages.T @ advantages)[None], (advantages.T @ lambdas)[None])[0]


def frank_wolfe_gap(advantages, lambdas, c):
    """Bounds f(c) - f* from above for a convex objective on the simplex: g^T c - min_j g_j."""
    gradient = 2 * advantages.T @ (advantages @ c) - advantages.T @ lambdas
    return float(gradient @ c - gradient.min())


@pytest.mark.parametrize("seed", range(20))
def test_two_objectives_match_the_closed_form_on_the_segment(seed):
    advantages, lambdas = problem(seed, 2, bias=float(seed % 3))
    # f(t) on c = (t, 1 - t): a quadratic in t, minimised on [0, 1] in closed form
    a, b = advantages[:, 0], advantages[:, 1]
    d = a - b
    curvature, slope = float(d @ d), float(2 * d @ b - lambdas @ d)
    t = min(1.0, max(0.0, -slope / (2 * curvature))) if curvature > 0 else float(slope < 0)
    best = value(advantages, lambdas, torch.tensor([t, 1 - t], dtype=torch.float64))
    c = solve(advantages, lambdas)
    assert abs(value(advantages, lambdas, c) - best) <= 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_three_objectives_are_at_least_as_good_as_a_fine_grid(seed):
    advantages, lambdas = problem(seed, 3, bias=float(seed % 3), duplicate=seed == 5)
    steps = 300
    grid = torch.tensor([(i, j, steps - i - j) for i in range(steps + 1) for j in range(steps + 1 - i)],
                        dtype=torch.float64) / steps
    y = grid @ advantages.T  # [P, n]
    grid_best = float(((y * y).sum(1) - y @ lambdas).min())
    c = solve(advantages, lambdas)
    found = value(advantages, lambdas, c)
    assert found <= grid_best + 1e-12
    # and the grid (spacing 1/300) gets within its discretisation error of it
    assert grid_best - found <= 1e-3 * (1 + abs(found))


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7, 9, 12])
@pytest.mark.parametrize("seed", range(4))
def test_the_optimum_is_certified_by_its_frank_wolfe_gap(k, seed):
    """Both methods (faces up to ENUMERATE_MAX_K, active set above), including singular problems."""
    advantages, lambdas = problem(100 * k + seed, k, n=5, bias=float(seed), duplicate=seed % 2 == 1)
    c = solve(advantages, lambdas)
    assert float(c.min()) >= 0 and abs(float(c.sum()) - 1) < 1e-12
    assert frank_wolfe_gap(advantages, lambdas, c) <= 1e-9
    # no vertex and no pair of objectives does better (a brute-force check of the small faces)
    found = value(advantages, lambdas, c)
    for i, j in itertools.combinations(range(k), 2):
        for t in torch.linspace(0, 1, 21, dtype=torch.float64):
            mix = torch.zeros(k, dtype=torch.float64)
            mix[i], mix[j] = t, 1 - t
            assert found <= value(advantages, lambdas, mix) + 1e-12


def test_both_methods_are_exercised():
    assert 2 <= ENUMERATE_MAX_K < 9


def test_an_all_zero_group_gets_the_uniform_mixture():
    c = solve(torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(c, torch.full((3,), 1 / 3, dtype=torch.float64))


# ----------------------------------------------------------------------------- the multi-rank path


@SETTINGS
@given(data=batches(min_objectives=2), weight_scope=st.sampled_from(["sample", "batch"]),
       center=st.booleans(), fusion=st.sampled_from(["sample", "group"]))
def test_credit_from_progress_supports_every_option(data, weight_scope, center, fusion):
    config = CreditConfig(weight_scope=weight_scope, explore_center=center, fusion=fusion)
    direct = compute_credit(*data, config)
    gathered = credit_from_progress(data[0], direct.delta_s.double(), data[2], config)
    for name, tensor in gathered.tensors().items():
        torch.testing.assert_close(tensor, getattr(direct, name), atol=1e-6, rtol=0, msg=name)


# ----------------------------------------------------------------------------- std_correction vs group size


def test_a_group_too_small_for_the_correction_is_an_error_naming_it():
    rewards, latents = torch.randn(7, 2, dtype=torch.float64), torch.randn(7, 3, 4)
    with pytest.raises(ValueError, match=r"^std_correction: 2 needs groups of more than 2 samples; group 42 has 2"):
        compute_credit(rewards, latents, [5, 5, 5, 42, 42, 5, 9], CreditConfig(std_correction=2))
    # groups of one are exempt (their advantage is 0 whatever the std), larger ones are fine
    credit = compute_credit(rewards, latents, [5, 5, 5, 42, 42, 42, 9], CreditConfig(std_correction=2))
    assert float(credit.objective_advantages[6].abs().max()) == 0
    assert float(credit.objective_advantages[:6].abs().max()) > 0


@pytest.mark.parametrize("options", [{"std_scope": "batch"}, {"mode": "gdpo"}])
def test_a_batch_too_small_for_the_correction_is_an_error(options):
    rewards, latents = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 3, 4)
    with pytest.raises(ValueError, match=r"^std_correction: 3 needs more than 3 samples for the batch std.*has 3"):
        compute_credit(rewards, latents, [0, 1, 2], CreditConfig(std_correction=3, **options))


# ----------------------------------------------------------------------------- config, flags, run log


@pytest.mark.parametrize("kwargs,argument", [({"weight_scope": "group"}, "weight_scope"),
                                             ({"fusion": "mgda"}, "fusion"), ({"explore_center": 1}, "explore_center")])
def test_bad_option_values_are_refused_by_name(kwargs, argument):
    with pytest.raises(ValueError, match=f"^{argument}:"):
        CreditConfig(**kwargs)


def test_defaults_are_the_spec():
    config = CreditConfig()
    assert (config.weight_scope, config.explore_center, config.fusion) == ("sample", False, "sample")


def test_flags_reach_the_engine_and_the_run_log_record():
    config, rest = parse_otca_args(["--otca", "--otca_weight_scope", "batch", "--otca_explore_center",
                                    "--otca_fusion", "group", "--otca_final_state", "prediction", "--lr", "1"])
    assert rest == ["--lr", "1"]
    credit = config.credit_config()
    assert (credit.weight_scope, credit.explore_center, credit.fusion) == ("batch", True, "group")
    logged = json.loads(json.dumps(credit.to_dict()))  # what the runtimes write as the record's config
    assert CreditConfig(**logged) == credit
    assert config.otca_final_state == "prediction"
    assert parse_otca_args(config.to_argv())[0] == config
    with pytest.raises(ValueError):
        parse_otca_args(["--otca_fusion", "mgda"])


# ----------------------------------------------------------------------------- an explicit final state (1.7)


@SETTINGS
@given(data=batches())
def test_an_explicit_final_state_replaces_the_last_latent(data):
    rewards, latents, group_ids = data
    same = compute_credit(rewards, latents, group_ids, final=latents[:, -1].clone())
    default = compute_credit(rewards, latents, group_ids)
    for name, tensor in default.tensors().items():
        torch.testing.assert_close(getattr(same, name), tensor, atol=1e-6, rtol=0, msg=name)
    prediction = latents[:, -1] + 0.5 * torch.randn_like(latents[:, -1])
    credit = compute_credit(rewards, latents, group_ids, final=prediction)
    states = torch.cat([latents[:, :-1], prediction[:, None]], dim=1).double()
    expected = torch.nn.functional.cosine_similarity(states, prediction[:, None].double(), dim=-1)
    torch.testing.assert_close(credit.similarity.double(), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(credit.delta_s.double(), expected.diff(dim=1), atol=1e-6, rtol=0)


def test_a_final_state_of_the_wrong_shape_is_refused():
    latents = torch.randn(4, 3, 2, 5)
    with pytest.raises(ValueError, match=r"^final: expected a float tensor of shape \(4, 2, 5\)"):
        compute_credit(torch.randn(4, 1), latents, [0, 0, 1, 1], final=torch.randn(4, 10))
    with pytest.raises(ValueError, match=r"^final: non-finite"):
        compute_credit(torch.randn(4, 1), latents, [0, 0, 1, 1], final=torch.full((4, 2, 5), float("nan")))
