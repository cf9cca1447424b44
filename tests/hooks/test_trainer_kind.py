"""doctor's rule for telling a GRPO trainer from one that is not (``hooks.trainer_kind``), on
trainer shapes written here: a GRPO loss, a DPO-like and an SFT-like one, a loss computed elsewhere."""
from otca_patch.hooks.trainer_kind import GRPO, NOT_GRPO, UNKNOWN, trainer_kind

GRPO_LOOP = '''
def train(sample, log_prob, j, accelerator):
    advantages = torch.clamp(sample["advantages"][:, j], -5, 5)
    ratio = torch.exp(log_prob - sample["log_probs"][:, j])
    unclipped_loss = -advantages * ratio
    clipped_loss = -advantages * torch.clamp(ratio, 0.9, 1.1)
    accelerator.backward(torch.maximum(unclipped_loss, clipped_loss).mean())
'''
# ranks samples by a group-normalised reward, then trains a preference loss: no advantage x ratio
DPO_LOOP = '''
def train(samples, stat_tracker, prompts, rewards, accelerator, beta):
    advantages = stat_tracker.update(prompts, rewards)
    best, worst = advantages.argmax(), advantages.argmin()
    loss = -torch.nn.functional.logsigmoid(beta * (samples[best] - samples[worst])).mean()
    accelerator.backward(loss)
'''
SFT_LOOP = '''
def train(model_pred, target, advantages, accelerator):
    keep = advantages > 0
    fm_loss = ((model_pred[keep] - target[keep]) ** 2).mean()
    accelerator.backward(fm_loss)
'''
ELSEWHERE = '''
def train(inferencer, sample, config):
    output = inferencer(sample=sample, learn=True, grpo_config=config)
    return output["loss"]
'''


def test_the_rule_by_structure(tmp_path):
    kinds = {}
    for name, source in {"grpo": GRPO_LOOP, "dpo": DPO_LOOP, "sft": SFT_LOOP, "elsewhere": ELSEWHERE}.items():
        (tmp_path / f"train_{name}.py").write_text(source)
        kinds[name] = trainer_kind(tmp_path / f"train_{name}.py")
    assert kinds == {"grpo": GRPO, "dpo": NOT_GRPO, "sft": NOT_GRPO, "elsewhere": UNKNOWN}
    (tmp_path / "broken.py").write_text("def (:\n")
    assert trainer_kind(tmp_path / "broken.py") == UNKNOWN


def test_the_product_may_be_written_either_way_round_and_name_the_advantage_by_subscript(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("loss = ratio * -sample['advantages'][:, j]\nloss.backward()\n")
    assert trainer_kind(path) == GRPO
    path.write_text("loss = -vq_advantages * torch.clamp(ratio, 0.9, 1.1)\n")
    assert trainer_kind(path) == GRPO
    path.write_text("loss = -advantages * weight\nloss.backward()\n")  # a weight is not a likelihood ratio
    assert trainer_kind(path) == NOT_GRPO
