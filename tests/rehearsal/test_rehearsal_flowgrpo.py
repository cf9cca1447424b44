"""What the FlowGRPO rehearsal reads back from a run: the numbers of upstream's wandb.log calls (losses,
rewards, optimizer steps) and its checkpoint folders."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otca_patch.rehearsal.flowgrpo import checkpoint_after_training, logged_metrics, optimizer_steps
from otca_patch.rehearsal.logged_numbers import FILE_NAME, logged_history

HISTORY = [
    {"eval_reward_avg": -0.5, "eval_images": {"_type": "images/separated"}},
    {"reward_avg": 0.25, "epoch": 0, "reward_ori_avg": 0.125, "group_size": 4},
    {"loss": 1 / 3, "policy_loss": 1 / 3, "approx_kl": 0.01, "epoch": 0},
    {"loss": 2 / 3, "policy_loss": 2 / 3, "kl_loss": 0.5, "epoch": 1},
]


def test_metrics_are_the_losses_and_rewards_record_by_record_in_key_order():
    assert logged_metrics(HISTORY) == [-0.5, 0.25, 0.125, 1 / 3, 1 / 3, 0.5, 2 / 3, 2 / 3]


def test_an_optimizer_step_is_a_record_with_a_loss():
    assert optimizer_steps(HISTORY) == 2
    assert optimizer_steps(HISTORY[:2]) == 0


@pytest.mark.parametrize("layout, saved", [
    ({"logs/a/checkpoints/checkpoint-2/lora/adapter_model.safetensors": b"w"}, True),  # save_ckpt's LoRA
    ({"logs/b/checkpoint-2/model.safetensors": b"w"}, True),  # save_fsdp_checkpoint
    ({"logs/b/checkpoint-0/model.safetensors": b"w"}, False),  # before any optimizer step
    ({"logs/a/checkpoints/checkpoint-2/lora/README.md": b"w"}, False),  # no weights
    ({}, False),
])
def test_a_checkpoint_counts_when_it_holds_weights_saved_after_training(tmp_path, layout, saved):
    for name, content in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    assert checkpoint_after_training(tmp_path) is saved


def test_each_wandb_log_call_is_copied_with_every_float_bit_before_it_logs(tmp_path):
    """Upstream's wandb.log calls, as in train_sd3.py: reduced tensors, numpy scalars, floats, an image;
    the process then ends with SIGTERM, as torch's agent ends a worker's group, and wandb never finishes."""
    values = [1 / 3, 2 / 7 + 1e-17, -1e-300]
    script = textwrap.dedent(f"""
        import os, signal, sys
        import numpy, torch, wandb
        from otca_patch.rehearsal.logged_numbers import copy_logged_numbers
        copy_logged_numbers(sys.argv[1])
        copy_logged_numbers(sys.argv[1])  # a second call copies once
        wandb.init(project="flow_grpo")
        for step, value in enumerate({values!r}):
            wandb.log({{"loss": torch.tensor(value, dtype=torch.float64), "reward_avg": numpy.float32(step / 4),
                       "epoch": step, "image": wandb.Image(numpy.zeros((4, 4, 3), dtype=numpy.uint8)),
                       "caption": "a cat", "eval": {{"reward_std": value}}, "flag": True,
                       "rewards": torch.zeros(3)}}, step=step)
        os.kill(os.getpid(), signal.SIGTERM)
    """)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / FILE_NAME)], cwd=tmp_path, env=env,
                          timeout=300)
    assert done.returncode == -15
    history = logged_history(tmp_path)
    assert [record["loss"] for record in history] == values
    assert [record["eval/reward_std"] for record in history] == values
    assert [record["reward_avg"] for record in history] == [0.0, 0.25, 0.5]
    assert [record["epoch"] for record in history] == [0, 1, 2]
    assert all(set(record) == {"loss", "reward_avg", "epoch", "eval/reward_std"} for record in history)


def test_no_copied_wandb_log_is_one_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="never called wandb.log"):
        logged_history(tmp_path)
