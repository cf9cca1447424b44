"""The credit bench: MARBLE's gradient combination, the gradient-conflict diagnostic, the
two task regimes and ``--regime``, and a tiny ablation over both regimes with every peer."""
import json
import math

import pytest
import torch
from demo_fixtures import one_thread, tiny_flags  # noqa: F401 (autouse)

from otca_patch.demo import ablate, cli
from otca_patch.demo.config import TINY_SIZES, DemoConfig, tiny_config
from otca_patch.demo.gradients import MarbleCombiner, conflict_diagnostic, min_norm_weights
from otca_patch.demo.regimes import REGIMES, regime_names


# ----------------------------------------------------------------------------- MARBLE

def test_min_norm_weights_of_two_gradients_have_the_closed_form():
    # argmin_a |a g1 + (1 - a) g2|^2 = (g2 - g1) . g2 / |g1 - g2|^2 = ((-1, 2) . (0, 2)) / 5 = 0.8
    weights = min_norm_weights(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    assert torch.allclose(weights, torch.tensor([0.8, 0.2], dtype=torch.float64), atol=1e-9)
    # a gradient inside the other's cone: the smaller one alone is the minimum-norm point
    assert torch.allclose(min_norm_weights(torch.tensor([[1.0, 0.0], [3.0, 0.1]])),
                          torch.tensor([1.0, 0.0], dtype=torch.float64), atol=1e-9)


def test_marble_normalises_the_gradients_keeps_an_ema_of_the_weights_and_rescales():
    combiner = MarbleCombiner()
    # first update: objective 2 has no gradient, so objective 1 takes all the weight
    first = combiner.combine(torch.tensor([[3.0, 0.0], [0.0, 0.0]]))
    assert torch.allclose(combiner.weights, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(first, torch.tensor([3.0, 0.0]))
    # second: two orthogonal gradients of norms 3 and 1 -> unit-normed MGDA weights (0.5, 0.5),
    # EMA 0.7 * (1, 0) + 0.3 * (0.5, 0.5) = (0.85, 0.15); update = weights . units * mean norm 2
    second = combiner.combine(torch.tensor([[3.0, 0.0], [0.0, 1.0]]))
    assert torch.allclose(combiner.weights, torch.tensor([0.85, 0.15], dtype=torch.float64))
    assert torch.allclose(second, torch.tensor([1.7, 0.3]))


# ----------------------------------------------------------------------------- the diagnostic

def test_conflict_diagnostic_on_planted_gradients():
    grads = torch.tensor([[1.0, 0.0], [-1.0, 0.1], [0.0, 0.0]])
    result = conflict_diagnostic(grads, torch.tensor([2.0, 0.0]))
    assert result["conflict"] is True
    assert result["worst"] == pytest.approx(-1 / math.sqrt(1.01))
    assert result["cosines"][0] == pytest.approx(1.0) and math.isnan(result["cosines"][2])  # no gradient: no cosine
    agreeing = conflict_diagnostic(torch.tensor([[1.0, 0.2], [0.5, 1.0]]), torch.tensor([1.0, 1.0]))
    assert agreeing["conflict"] is False and 0 < agreeing["worst"] < 1
    assert math.isnan(conflict_diagnostic(grads, torch.zeros(2))["worst"])  # no update: nothing to measure


def test_objective_gradients_of_the_update_equal_separate_backward_passes():
    """The batched vector-Jacobian product of ``policy_update`` gives each loss's own gradient."""
    from otca_patch.demo.grpo import _stacked_gradients
    from otca_patch.demo.pretrain import build_model

    config = tiny_config()
    model = build_model(config)
    params = [p for p in model.parameters() if p.requires_grad]
    z = torch.randn(3, *model.token_shape)
    outputs = model(z, torch.full((3,), 0.5), torch.zeros(3, 4, dtype=torch.long)).flatten(1).mean(1)  # [3]
    losses = [(outputs * torch.tensor(c)).sum() for c in ([1.0, -2.0, 0.5], [0.0, 1.0, 3.0])]
    separate = []
    for loss in losses:
        grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        separate.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)]))
    stacked = _stacked_gradients(outputs, losses, params)  # frees the graph
    assert stacked.shape == (2, sum(p.numel() for p in params))
    for row, flat in zip(stacked, separate):
        assert torch.allclose(row, flat, atol=1e-6, rtol=1e-4) and flat.abs().max() > 0


# ----------------------------------------------------------------------------- regimes

def test_regimes_have_their_own_objectives_base_models_and_a_known_optimum():
    from otca_patch.demo.data import clean_render, corrupted_render, sample_prompts
    from otca_patch.demo.pixel_rewards import objective_rewards

    prompts = sample_prompts(400, torch.Generator().manual_seed(0))
    correlations = {}
    for name, regime in REGIMES.items():
        assert objective_rewards(clean_render(prompts, 12), prompts, regime.objectives) == pytest.approx(1.0, abs=1e-5)
        images = corrupted_render(prompts, 12, 0.5, torch.Generator().manual_seed(1), regime.corruptions)
        correlations[name] = torch.corrcoef(objective_rewards(images, prompts, regime.objectives).T)
    # on the pre-training mixture, every pair of the agreeing objectives moves together more than
    # any pair that involves the conflicting regime's `edges`
    assert correlations["agreeing"].min() > correlations["conflicting"][2, :2].max()
    keys = {DemoConfig(regime=name).base_model_key() for name in REGIMES}
    assert len(keys) == len(REGIMES)  # one cached base model per regime


def test_the_default_regime_keeps_its_base_model_cache_name():
    import hashlib

    from otca_patch.demo.config import BASE_MODEL_FORMAT

    config = DemoConfig()
    fields = ("base_seed", "image_size", "heads", "head_dim", "layers", "single_layers", "text_dim",
              "pretrain_steps", "pretrain_batch", "pretrain_lr", "corrupt_prob")
    payload = json.dumps({k: getattr(config, k) for k in fields} | {"format": BASE_MODEL_FORMAT}, sort_keys=True)
    assert config.regime == "conflicting" and config.base_model_key() == hashlib.sha256(payload.encode()).hexdigest()[:12]


def test_regime_flag_parsing(capsys, tmp_path):
    assert regime_names("both") == ["conflicting", "agreeing"] and regime_names("agreeing") == ["agreeing"]
    with pytest.raises(ValueError, match="--regime: unknown regime 'mixed'"):
        regime_names("mixed")
    assert cli.main(["--regime", "both", "--out", str(tmp_path)]) == 2
    assert "--regime: both is for otca-patch ablate" in capsys.readouterr().err
    assert ablate.main(["--regime", "mixed", "--out", str(tmp_path)]) == 2
    assert "invalid choice: 'mixed'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    from otca_patch.flags import from_namespace

    default = from_namespace(DemoConfig, cli.build_parser().parse_args([]))
    assert default.regime == "conflicting" and default.objectives == ("palette", "shape", "edges")  # demo unchanged
    assert from_namespace(DemoConfig, cli.build_parser().parse_args(["--regime", "agreeing"])).objectives[2] == "fidelity"
    with pytest.raises(ValueError, match="--regime"):
        DemoConfig(regime="both").objectives


# ----------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_tiny_ablation_over_both_regimes_with_every_peer(tmp_path):
    flags = ["--out", str(tmp_path), "--base_cache", str(tmp_path), "--regime", "both",
             "--modes", "multi_grpo,otca,coca,tempflow,marble", "--seeds", "0,1"] + tiny_flags()
    assert ablate.main(flags) == 0
    both = json.loads((tmp_path / "ablation.json").read_text())
    assert set(both["regimes"]) == {"conflicting", "agreeing"}
    for name, result in both["regimes"].items():
        assert result["regime"] == name and result["objectives"] == list(REGIMES[name].objectives)
        assert set(result["table"]) == {"multi_grpo", "otca", "coca", "tempflow", "marble"}
        for row in result["table"].values():
            assert {"gradient_conflict", "worst_cosine", "drift", "mean_gap_closed"} <= set(row)
            assert 0 <= row["gradient_conflict"]["mean"] <= 1 and -1 <= row["worst_cosine"]["mean"] <= 1
        assert set(result["peer_comparisons"]) == {"coca", "tempflow", "marble"}
        run = next(r for r in result["runs"] if r["mode"] == "marble")
        assert len(run["history"]["worst_cosine"]) == TINY_SIZES["grpo_steps"]
        assert sum(run["history"]["mixture"][-1]) == pytest.approx(1.0)  # MARBLE's weights on the simplex
        folder = tmp_path / name
        assert (folder / "ablation.json").is_file() and (folder / "gradient_conflict.png").stat().st_size > 0
        text = (folder / "ablation.md").read_text()
        assert f"regime `{name}`" in text and "`otca` - peer" in text and "worst cosine" in text
    assert "regime `agreeing`" in (tmp_path / "ablation.md").read_text()
