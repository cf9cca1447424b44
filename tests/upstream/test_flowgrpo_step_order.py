"""FlowGRPO's trained-step invariant. A copy of ``scripts/train_sd3.py`` that trains
its steps in another order than the advantage's columns (its step-keyed tensors reversed or shuffled
before training, the advantages left alone) keeps every anchor and pin, so doctor passes; under
``--otca`` it stops at the first training step with a ``PatchError``, before any loss."""
import shutil
import subprocess
import sys

import pytest

from .conftest import REPO, run_flowgrpo_smoke

pytestmark = pytest.mark.upstream

STEP_KEYS = '("timesteps", "latents", "next_latents", "log_probs")'
ORDERS = {  # the smoke samples 4 steps and trains columns 0, 1, 2
    "reversed": f"samples = {{k: (v.flip(1) if k in {STEP_KEYS} else v) for k, v in samples.items()}}",
    "shuffled": f"samples = {{k: (v[:, torch.tensor([2, 0, 3, 1])] if k in {STEP_KEYS} else v) "
                f"for k, v in samples.items()}}",
}
BEFORE_TRAINING = '        total_batch_size, num_timesteps = samples["timesteps"].shape\n'


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_steps_trained_in_another_order_stop_at_the_first_training_step(flow_grpo, tmp_path, order):
    copy = tmp_path / "flow_grpo"
    for part in ("scripts", "config", "flow_grpo"):
        shutil.copytree(flow_grpo / part, copy / part)
    trainer = copy / "scripts" / "train_sd3.py"
    source = trainer.read_text()
    assert source.count(BEFORE_TRAINING) == 1
    trainer.write_text(source.replace(BEFORE_TRAINING, f"        {ORDERS[order]}\n{BEFORE_TRAINING}"))
    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(copy)], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    assert doctor.returncode == 0, doctor.stdout  # every anchor and pin still holds
    run = run_flowgrpo_smoke(copy, tmp_path / "out", "--otca", "--steps", "1",
                             env={"OTCA_TINY_SD3_DIR": str(tmp_path / "tiny_sd3")}, check=False)
    assert run.completed.returncode != 0 and run.result is None and not run.log
    stderr = run.completed.stderr
    assert "invariant 'trained_step_matches_advantage_column'" in stderr, stderr[-3000:]
    assert "scripts/train_sd3.py" in stderr and "function main" in stderr
    assert "advantage of column 0" in stderr and "compute_log_prob()" in stderr
