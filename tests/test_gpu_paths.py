"""What scripts/gpu_check.sh runs on CUDA, exercised on the CPU first: the smoke device and backend,
NCCL after set_device, every model and loader batch moved to the rank's GPU, bf16 latents through the
layer under autocast, the layer meter, and the script's refusal without CUDA."""
import json
import os
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.smoke import environment, harness, meter
from otca_patch.targets.registry import runtime_for
from fake_cuda import FakeCuda

REPO = Path(__file__).resolve().parent.parent


def test_the_smoke_device_is_the_cpu_unless_cuda_is_asked_for(monkeypatch):
    monkeypatch.delenv(environment.DEVICE_ENV, raising=False)
    assert environment.smoke_device() == torch.device("cpu")
    assert environment.backend_for(environment.smoke_device()) == "gloo"
    monkeypatch.setenv(environment.DEVICE_ENV, "tpu")
    with pytest.raises(ValueError, match="OTCA_SMOKE_DEVICE='tpu': expected cpu or cuda"):
        environment.smoke_device()
    monkeypatch.setenv(environment.DEVICE_ENV, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="OTCA_SMOKE_DEVICE=cuda but torch sees no CUDA device"):
        environment.smoke_device()


def test_on_cuda_each_rank_sets_its_gpu_then_opens_an_nccl_world(monkeypatch):
    cuda = FakeCuda(monkeypatch, devices=2)
    monkeypatch.setenv(environment.DEVICE_ENV, "cuda")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert environment.smoke_device() == torch.device("cuda", 1)
    assert environment.backend_for(environment.smoke_device()) == "nccl"
    opened = []
    monkeypatch.setattr(environment.dist, "is_initialized", lambda: bool(opened))
    monkeypatch.setattr(environment.dist, "init_process_group",
                        lambda backend: opened.append((backend, cuda.current)))
    monkeypatch.setattr(environment.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(environment.dist, "get_world_size", lambda: 2)
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, {"RANK": "1", "WORLD_SIZE": "2"}.get(key, "127.0.0.1" if key == "MASTER_ADDR" else "29500"))
    assert environment.init_process_group() == (1, 2)
    assert opened == [("nccl", 1)]  # the device was set before the group, as upstream's trainers do
    with environment.cpu_as_current_device():  # FSDP helpers then see the real current GPU
        assert torch.cuda.current_device() == 1


def test_models_and_loader_batches_go_to_the_ranks_gpu(monkeypatch):
    cuda = FakeCuda(monkeypatch, devices=2)
    monkeypatch.setenv(environment.DEVICE_ENV, "cuda")
    monkeypatch.setenv("LOCAL_RANK", "1")
    vae, head = harness.on_device(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    loader = harness.device_loader(iter([(torch.zeros(1, 3), torch.ones(1), ["a caption"])]))
    embeds, mask, caption = next(loader)
    assert caption == ["a caption"]
    inputs = harness.inputs_on_device({"prompt_embeds": torch.zeros(2), "caption": ["x"], "loader": iter([(torch.ones(1),)])})
    next(inputs["loader"])
    assert cuda.moves == [("module", 1), ("module", 1), ("tensor", 1), ("tensor", 1), ("tensor", 1), ("tensor", 1)]


def test_bf16_latents_under_autocast_train_in_upstreams_dtype(tmp_path):
    runtime = runtime_for("dancegrpo-flux", OtcaConfig(otca=True, otca_log_dir=str(tmp_path)))
    all_latents = torch.randn(4, 7, 16, 64).to(torch.bfloat16)
    samples = {"log_probs": torch.randn(4, 6, dtype=torch.bfloat16)[:, :-1], "rewards": torch.randn(4)}
    upstream = torch.randn(4, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        combined = runtime.assign_advantages(samples, all_latents, upstream, Namespace(use_group=True, num_generations=2))
    trained = samples["otca_advantages"]
    assert combined.dtype == trained.dtype == torch.bfloat16 and trained.shape == (4, 5)
    assert torch.isfinite(trained.float()).all() and trained.float().abs().sum() > 0
    assert torch.allclose(trained.float(), runtime.record["step_weights"][:, :5].float() * combined.float()[:, None],
                          rtol=2e-2, atol=1e-2)  # TCD's weights over the combined advantage, rounded to bf16


def test_the_meter_splits_each_step_into_the_layers_share(tmp_path):
    class Runtime:
        def assign_advantages(self):
            self.credit()

        def credit(self):
            sum(range(20000))

        def write_log(self):
            self.write_record()

        def write_record(self):
            pass

    runtime = Runtime()
    meter.LayerMeter(runtime, tmp_path / "layer_meter_rank0.json", torch.device("cpu"))
    for _ in range(2):
        sum(range(200000))  # upstream's own work
        runtime.assign_advantages()
        runtime.write_log()
    steps = json.loads((tmp_path / "layer_meter_rank0.json").read_text())["steps"]
    assert len(steps) == 2
    for step in steps:
        assert 0 < step["layer_seconds"] < step["seconds"] and 0 < step["time_ratio"] < 1
        assert step["memory_ratio"] is None  # CPU: no allocator statistics
    assert meter.summary(tmp_path).startswith("layer: time 0.") and "memory n/a (CPU)" in meter.summary(tmp_path)


def test_gpu_check_refuses_without_cuda():
    done = subprocess.run([str(REPO / "scripts" / "gpu_check.sh")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "OTCA_PYTHON": os.environ.get("OTCA_PYTHON", __import__("sys").executable)})
    assert done.returncode == 2
    assert "no CUDA device here" in done.stdout and "nothing was run" in done.stdout
