"""Per-objective monitoring on wandb (0.18.5, offline, as in the trainers' environments): the layer's
``otca/`` numbers of step t land on the row of upstream's own ``wandb.log(..., step=t)``.

DanceGRPO's loop: ``loss, grad_norm = train_one_step(...)`` (the layer writes its record inside the
wrapped call), then ``wandb.log({"train_loss": loss, ...}, step=step)``. The test drives the real
FLUX runtime through that loop and reads the offline run file back with wandb's own reader.
"""
import json
import time
from types import SimpleNamespace

import pytest
import torch
import wandb  # the dev environment has it: setup.sh installs the upstream extra

from otca_patch.config import OtcaConfig
from otca_patch.targets.registry import runtime_for

NAMES = ("upstream", "clip_t")
STEPS = 4


def planted_rewards(step: int) -> torch.Tensor:
    """[4, 2]: two prompts x two samples; objective means 0.1 t and -t (independent of the layer)."""
    return torch.tensor([[0.1 * step - 0.05, -step + 1.0], [0.1 * step + 0.05, -step - 1.0],
                         [0.1 * step - 0.02, -step + 0.5], [0.1 * step + 0.02, -step - 0.5]], dtype=torch.float64)


def read_history(run_dir) -> dict:
    """{step: {key: value}} from the offline ``run-*.wandb`` file (wandb's datastore of protobuf records)."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    [path] = list(run_dir.glob("run-*.wandb"))
    deadline = time.monotonic() + 120  # the writer process may still be closing the file after finish()
    while path.stat().st_size <= 7 and time.monotonic() < deadline:
        time.sleep(0.25)
    store = datastore.DataStore()
    store.open_for_scan(str(path))
    rows = {}
    while True:
        data = store.scan_data()
        if data is None:
            break
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            rows[int(items["_step"])] = items
    return rows


def drive_upstream_loop(tmp_path, observe: bool, joins: str | None = None) -> dict:
    config = OtcaConfig(otca=not observe, otca_observe=observe, otca_rewards=("upstream",),
                        otca_log_dir=str(tmp_path / "log"))
    runtime = runtime_for("dancegrpo-flux", config)
    runtime.objectives = SimpleNamespace(names=NAMES)  # two objectives without loading a model
    if joins:
        runtime.upstream_logs_step = joins
    generator = torch.Generator().manual_seed(0)

    def train_one_step(step):
        rewards = planted_rewards(step)
        delta_s = torch.rand(4, 5, generator=generator, dtype=torch.float64) + 0.1
        local, summary = runtime.credit(rewards, delta_s, torch.tensor([0, 0, 1, 1]))
        runtime.trained_steps = torch.zeros(4, 2, dtype=torch.long)
        runtime.record = runtime.credit_record(local, summary, rewards, local["advantages"], local["combined"])
        return 10.0 * step, 0.5  # upstream's (loss, grad_norm)

    wrapped = runtime.wrap_train_step(train_one_step)
    run = wandb.init(project="otca-test", dir=str(tmp_path), mode="offline", settings=wandb.Settings(silent=True))
    try:
        for step in range(1, STEPS + 1):  # DanceGRPO's loop, rank 0
            loss, grad_norm = wrapped(step)
            wandb.log({"train_loss": loss, "grad_norm": grad_norm}, step=step)
    finally:
        run.finish()
    [run_dir] = list((tmp_path / "wandb").glob("offline-run-*"))
    return read_history(run_dir)


@pytest.mark.parametrize("observe", [False, True])
def test_the_row_of_step_t_holds_upstreams_loss_and_every_objectives_reward_of_step_t(tmp_path, monkeypatch, observe):
    monkeypatch.setenv("WANDB_MODE", "offline")
    rows = drive_upstream_loop(tmp_path, observe)
    assert sorted(rows) == list(range(1, STEPS + 1))
    for step, row in rows.items():
        expected = planted_rewards(step).mean(dim=0)
        assert row["train_loss"] == pytest.approx(10.0 * step)
        assert row["otca/reward/upstream"] == pytest.approx(float(expected[0]))
        assert row["otca/reward/clip_t"] == pytest.approx(float(expected[1]))
        for name in NAMES:  # group advantages average to 0 within each prompt; the mixture is a share
            assert row[f"otca/advantage/{name}"] == pytest.approx(0.0, abs=1e-6)
            assert row[f"otca/advantage_std/{name}"] > 0 and 0 <= row[f"otca/mixture/{name}"] <= 1
        assert 0 <= row["otca/conflict_share"] <= 1
        # the step-weight profile: one scalar per denoising step (a line each over training), no histogram
        assert not any(key.startswith("otca/step_weight_profile") for key in row)
        steps = sorted(key for key in row if key.startswith("otca/step_weight/"))
        assert steps == [f"otca/step_weight/step_{i}" for i in range(5)]  # 5 denoising steps, 5 lines
        profile = [row[key] for key in steps]
        assert sum(profile) / 5 == pytest.approx(1.0, abs=1e-5)  # TCD weights average 1
        assert max(profile) <= row["otca/step_weight_max"] + 1e-6


def test_commit_false_would_put_step_t_on_the_previous_row(tmp_path, monkeypatch):
    """Why the layer waits for upstream's log: what it did before (commit=False inside train_one_step)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    rows = drive_upstream_loop(tmp_path, observe=True, joins="current")
    assert rows[1]["otca/reward/upstream"] == pytest.approx(float(planted_rewards(2).mean(dim=0)[0]))


def test_an_epoch_record_joins_the_epochs_last_training_row(tmp_path, monkeypatch):
    """FlowGRPO / DanceGRPO SD: sampling logs at step g, training logs g..g+n-1 (then global_step += 1),
    the layer writes the epoch's record at the epoch's end ("current": the row still open)."""
    from otca_patch.targets.monitoring import WandbRows

    monkeypatch.setenv("WANDB_MODE", "offline")
    rows_writer = WandbRows()
    run = wandb.init(project="otca-test", dir=str(tmp_path), mode="offline", settings=wandb.Settings(silent=True))
    try:
        global_step = 0
        for epoch in range(3):
            wandb.log({"reward_mean": float(epoch)}, step=global_step)
            for _ in range(2):
                wandb.log({"loss": 100.0 * epoch + global_step}, step=global_step)
                global_step += 1
            rows_writer.log({"otca/reward/upstream": float(epoch)}, "current")
    finally:
        run.finish()
    [run_dir] = list((tmp_path / "wandb").glob("offline-run-*"))
    rows = read_history(run_dir)
    for epoch in range(3):
        last_training_step = 2 * epoch + 1
        assert rows[last_training_step]["otca/reward/upstream"] == float(epoch)
        assert rows[last_training_step]["loss"] == 100.0 * epoch + last_training_step


def test_the_step_weight_lines_are_named_so_that_they_sort_in_step_order():
    from otca_patch.targets.monitoring import wandb_scalars

    scalars = wandb_scalars({"step_weight_mean_per_step": [0.5 + i / 24 for i in range(12)]}, ())
    names = [name for name in scalars if name.startswith("otca/step_weight/")]
    assert names == sorted(names) and names[0] == "otca/step_weight/step_00" and names[-1] == "otca/step_weight/step_11"
    assert scalars["otca/step_weight/step_11"] == pytest.approx(0.5 + 11 / 24, abs=1e-12)
