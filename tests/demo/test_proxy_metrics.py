"""The proxy-validity metrics (spec section 7) on hand-made inputs."""
import math

import pytest
import torch

from otca_patch.demo.proxy import (
    METRIC_NAMES, PAPER_TABLE5, ROW_KEYS, argmax_distance, average_ranks, control_proxies, format_against_paper,
    format_rows, pairwise_agreement, pearson, proxy_metrics, proxy_rows, recall_at_k, residual_pearson, spearman,
)

STEPS = torch.tensor([[0.1, 0.5, 0.2, 0.9, 0.3, 0.05, 0.7, 0.4]])


def test_perfect_agreement_gives_the_best_value_of_every_metric():
    delta_r = 3 * STEPS + 1  # a positive affine map keeps every order
    metrics = proxy_metrics(STEPS, delta_r)
    for name in ("pearson", "spearman", "pairwise_agreement", "recall_at_3", "recall_at_5"):
        assert metrics[name] == pytest.approx(1.0)
    assert metrics["argmax_distance"] == 0
    assert metrics["trajectories"] == 1 and metrics["steps"] == 8


def test_reversed_order_gives_minus_one_and_no_pairwise_agreement():
    metrics = proxy_metrics(STEPS, -STEPS)
    assert metrics["pearson"] == pytest.approx(-1.0)
    assert metrics["spearman"] == pytest.approx(-1.0)
    assert metrics["pairwise_agreement"] == pytest.approx(0.0)
    # top-3 of dS = steps 3, 6, 1; top-3 of -dS = steps 5, 0, 2: no overlap
    assert metrics["recall_at_3"] == 0.0
    assert metrics["argmax_distance"] == 2  # argmax dS = step 3 (0.9), argmax -dS = step 5 (-0.05)


def test_spearman_is_rank_based_and_pearson_is_not():
    delta_r = STEPS ** 3  # monotone, not linear
    assert spearman(STEPS, delta_r).item() == pytest.approx(1.0)
    assert pearson(STEPS, delta_r).item() < 0.99


def test_recall_counts_shared_top_steps():
    delta_s = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0, 0.0]])
    delta_r = torch.tensor([[5.0, 0.0, 4.0, 1.0, 3.0, 2.0]])  # top-3 steps 0, 2, 4 against 0, 1, 2
    assert recall_at_k(delta_s, delta_r, 3).item() == pytest.approx(2 / 3)
    assert recall_at_k(delta_s, delta_r, 5).item() == pytest.approx(4 / 5)
    assert recall_at_k(delta_s, delta_r, 6).item() == pytest.approx(1.0)


def test_pairwise_agreement_counts_ties_as_half_and_skips_tied_rewards():
    delta_s = torch.tensor([[1.0, 1.0, 2.0]])
    delta_r = torch.tensor([[1.0, 2.0, 3.0]])
    # pairs (0,1): dS tied -> 0.5; (0,2) and (1,2) agree -> (0.5 + 1 + 1) / 3
    assert pairwise_agreement(delta_s, delta_r).item() == pytest.approx(2.5 / 3)
    flat_r = torch.tensor([[2.0, 2.0, 2.0]])
    assert math.isnan(pairwise_agreement(delta_s, flat_r).item())


def test_average_ranks_share_ties():
    ranks = average_ranks(torch.tensor([[10.0, 20.0, 20.0, 5.0]]))
    assert ranks.tolist() == [[2.0, 3.5, 3.5, 1.0]]


def test_argmax_distance_is_per_trajectory_then_averaged():
    delta_s = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    delta_r = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    assert argmax_distance(delta_s, delta_r).tolist() == [0.0, 3.0]
    assert proxy_metrics(delta_s, delta_r)["argmax_distance"] == pytest.approx(1.5)


def test_vectorised_rows_match_one_at_a_time():
    generator = torch.Generator().manual_seed(0)
    delta_s, delta_r = torch.randn(6, 16, generator=generator), torch.randn(6, 16, generator=generator)
    together = spearman(delta_s, delta_r)
    alone = torch.cat([spearman(delta_s[i:i + 1], delta_r[i:i + 1]) for i in range(6)])
    assert torch.allclose(together, alone)


def test_constant_rows_are_left_out_of_correlations_and_counted():
    delta_s = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    delta_r = torch.tensor([[1.0, 2.0, 4.0], [3.0, 1.0, 2.0]])
    metrics = proxy_metrics(delta_s, delta_r)
    assert metrics["valid_pearson"] == 1 and metrics["pearson"] > 0.9
    assert metrics["valid_recall_at_3"] == 2
    assert math.isnan(metrics["recall_at_5"]) and metrics["valid_recall_at_5"] == 0  # T = 3 < 5


@pytest.mark.parametrize("delta_s, delta_r, message", [
    (torch.zeros(2, 4), torch.zeros(2, 5), "same shape"),
    (torch.zeros(4), torch.zeros(4), r"\[N, T\]"),
    (torch.tensor([[1.0, float("nan")]]), torch.zeros(1, 2), "non-finite"),
    ([[1.0, 2.0]], torch.zeros(1, 2), "torch.Tensor"),
])
def test_bad_inputs_are_named(delta_s, delta_r, message):
    with pytest.raises(ValueError, match=message):
        proxy_metrics(delta_s, delta_r)


def test_recall_k_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="k: must be an integer"):
        recall_at_k(torch.zeros(1, 3), torch.zeros(1, 3), 4)


def test_table_prints_the_paper_beside_the_measurement():
    table = format_against_paper({"demo": proxy_metrics(STEPS, STEPS)})
    assert "0.909" in table and "0.740" in table and "demo" in table
    assert set(PAPER_TABLE5) == set(METRIC_NAMES)


def test_residual_pearson_ignores_a_shared_step_profile():
    generator = torch.Generator().manual_seed(0)
    profile = torch.linspace(1.0, 0.0, 8)
    noise_s, noise_r = torch.randn(50, 8, generator=generator), torch.randn(50, 8, generator=generator)
    # the same profile in both, independent per-trajectory parts: high per-trajectory Pearson, residual ~ 0
    delta_s, delta_r = 10 * profile + 0.1 * noise_s, 10 * profile + 0.1 * noise_r
    assert proxy_metrics(delta_s, delta_r)["pearson"] > 0.9
    assert abs(residual_pearson(delta_s, delta_r)) < 0.15
    # per-trajectory parts that agree: residual ~ 1
    assert residual_pearson(10 * profile + noise_s, 3 * profile + noise_s) == pytest.approx(1.0)


def test_controls_are_trajectory_blind_profiles():
    delta_s = torch.tensor([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4]])
    sigmas = torch.tensor([1.0, 0.9, 0.5, 0.0])
    controls = control_proxies(delta_s, sigmas)
    assert torch.allclose(controls["mean_dS_profile"], torch.tensor([[0.2, 0.4, 0.4]] * 2, dtype=torch.float64))
    assert torch.allclose(controls["sigma_decrement"], torch.tensor([[0.1, 0.4, 0.5]] * 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="sigmas"):
        control_proxies(delta_s, torch.zeros(3))


def test_rows_cover_every_proxy_and_definition_with_the_short_names():
    delta_s = torch.tensor([[0.1, 0.5, 0.2, 0.9, 0.3], [0.4, 0.1, 0.3, 0.2, 0.6]])
    rows = proxy_rows(delta_s, {"prediction": delta_s, "latent": -delta_s}, sigmas=torch.linspace(1, 0, 6))
    assert [(r["proxy"], r["definition"]) for r in rows] == [
        (p, d) for d in ("prediction", "latent") for p in ("dS", "mean_dS_profile", "sigma_decrement")]
    assert rows[0]["pearson"] == pytest.approx(1.0) and rows[3]["pearson"] == pytest.approx(-1.0)
    assert set(ROW_KEYS.values()) <= set(rows[0])
    assert "| dS | prediction | 1.000" in format_rows(rows)
