"""What the DanceGRPO rehearsal reads back from upstream's HunyuanVideo prints."""
from otca_patch.rehearsal.dancegrpo import hunyuan_numbers

PRINTED = """\
gathered_vq_reward tensor([-0.5794, -0.6085])
vq loss/mq loss -0.0295 2e-05
vq/mq reward -0.57 0.058
 ratio tensor([1.], grad_fn=<ExpBackward0>)
vq advantage/mq advantage 1.06 nan
final loss -0.0295
Steps:   0%|          | 1/100000 [00:39<558:13:08, loss=0.1567]
"""


def test_hunyuan_prints_give_each_loss_reward_and_advantage_in_order(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text(PRINTED)
    numbers = hunyuan_numbers(log)
    assert numbers[:7] == [-0.0295, 2e-05, -0.57, 0.058, 1.06, numbers[5], -0.0295]
    assert numbers[5] != numbers[5]  # nan, kept so that a nan in one run only is a difference
    assert len(numbers) == 7


def test_no_log_gives_no_numbers(tmp_path):
    assert hunyuan_numbers(tmp_path / "absent.log") == []
