"""The demo's default learning rate is at the scale where GRPO works: single-objective GRPO (Multi-GRPO
with one objective weight 1, the others 0) raises its own objective on the fixed evaluation set,
from the default base model with every other default unchanged."""
import pytest
import torch

from otca_patch.demo.config import DemoConfig
from otca_patch.demo.evaluation import evaluate, make_eval_set
from otca_patch.demo.grpo import train_mode
from otca_patch.demo.pixel_rewards import OBJECTIVES
from otca_patch.demo.pretrain import load_or_train_base_model
from otca_patch.demo.variants import Variant


@pytest.fixture(scope="module")
def default_base(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    config = DemoConfig(out=str(tmp_path_factory.mktemp("base")), quiet=True, grpo_steps=30)
    model, _ = load_or_train_base_model(config, log=lambda msg: None)
    eval_set = make_eval_set(config, model.token_shape)
    base_rewards, _ = evaluate(model, eval_set, config)
    yield config, model, eval_set, base_rewards.mean(0)
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_single_objective_grpo_improves_its_objective_at_the_default_learning_rate(default_base, objective):
    config, model, eval_set, base = default_base
    weights = tuple(1.0 if name == objective else 0.0 for name in OBJECTIVES)
    variant = Variant(f"{objective}_only", "multi_grpo", {"objective_weights": weights})
    _, history = train_mode(model, config, variant, 0, eval_set, base.tolist())
    k = OBJECTIVES.index(objective)
    final = history.eval_rewards[-1][k]
    gap = 1.0 - base[k].item()  # the oracle (clean renders) scores 1
    assert final > base[k].item() + 0.05 * gap, (objective, base[k].item(), final)
