"""What scripts/gpu_check.sh runs on CUDA, exercised on the CPU first: the smoke device and backend,
NCCL then set_device (upstream's order), every model and loader batch moved to the rank's GPU, bf16 latents through the
layer under autocast, the layer meter, and the script's refusal without CUDA."""
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.smoke import harness
from otca_patch.tools import layer_meter as meter
from otca_patch.stand_ins import cpu as environment
from otca_patch.targets.registry import runtime_for
from fake_cuda import FakeCuda

REPO = Path(__file__).resolve().parents[2]


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


def test_on_cuda_each_rank_opens_an_nccl_world_then_sets_its_gpu_as_upstream(monkeypatch):
    """Upstream's order (DanceGRPO train_grpo_flux.py:629-630, Hunyuan 503-504, Wan 550-551, MixGRPO
    635-636): ``init_process_group`` first, ``set_device`` after. The layer's rank check runs in
    between, while every rank is still on GPU 0: it must talk through the store only, with no
    collective and no tensor on a device (NCCL would put every rank's on GPU 0)."""
    import threading

    from otca_patch.targets import rank_check

    cuda = FakeCuda(monkeypatch, devices=2)
    monkeypatch.setenv(environment.DEVICE_ENV, "cuda")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert environment.smoke_device() == torch.device("cuda", 1)
    assert environment.backend_for(environment.smoke_device()) == "nccl"
    calls = []
    monkeypatch.setattr(environment.dist, "is_initialized", lambda: any(c[0] == "init" for c in calls))
    monkeypatch.setattr(environment.dist, "init_process_group",
                        lambda backend: calls.append(("init", backend, cuda.current)))
    monkeypatch.setattr(environment.dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(environment.dist, "get_world_size", lambda group=None: 2)
    for collective in ("all_gather", "all_reduce", "broadcast", "barrier", "all_gather_object", "broadcast_object_list"):
        monkeypatch.setattr(environment.dist, collective, lambda *a, _name=collective, **k: calls.append((_name,)))
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    # the layer owes the check (as an --otca trainer's import arms it); rank 0 checks in another thread
    store = environment.dist.HashStore()
    monkeypatch.setattr(rank_check, "_pending", rank_check._Pending())
    monkeypatch.setattr(rank_check, "default_store", lambda: (store, "a test store"))
    checked = rank_check.check_ranks
    monkeypatch.setattr(rank_check, "check_ranks", lambda *a, **k: (calls.append(("check", cuda.current)),
                                                                     checked(*a, **k))[1])
    entry = {"host": "node-a", "pid": 1, "layer": "0", "target": "t", "spec_sha256": "s", "file_sha256": "f",
             "flags": {"otca": True}, "local_world_size": 2}
    rank0 = threading.Thread(target=checked, args=(store, 0, 2, {**entry, "local_rank": 0}, 60))
    rank0.start()
    rank_check.arm({**entry, "local_rank": 1}, 60)
    assert environment.init_process_group() == (1, 2)
    rank0.join(60)
    assert calls == [("init", "nccl", 0), ("check", 0)]  # the group first, the check in it, no collective
    assert rank_check.result()["world_size"] == 2
    assert cuda.current == 1  # then this rank's GPU, as upstream sets it
    assert cuda.moves == [] and cuda.factories == []  # nothing placed on a device in that window
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


def gpu_check(tmp_path, python: str, **env):
    """scripts/gpu_check.sh (the GPU call) run with ``python`` as the GPU machine's interpreter."""
    return subprocess.run([str(REPO / "scripts" / "gpu_check.sh")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OTCA_PYTHON": python, "TMPDIR": str(tmp_path), **env})


def python_wrapper(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_gpu_check_refuses_without_cuda(tmp_path):
    done = gpu_check(tmp_path, sys.executable, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device here" in done.stdout and "nothing was run" in done.stdout


def test_gpu_check_names_a_broken_interpreter_and_a_missing_or_failing_torch(tmp_path):
    done = gpu_check(tmp_path, str(tmp_path / "no-such-python"))
    assert done.returncode == 3 and "the interpreter" in done.stdout and "does not run" in done.stdout, done.stdout
    assert "CUDA" not in done.stdout
    # an interpreter without site-packages: no torch at all
    bare = python_wrapper(tmp_path, "bare-python", f'exec "{sys.executable}" -S -I "$@"')
    done = gpu_check(tmp_path, bare)
    assert done.returncode == 3 and "torch is not installed for" in done.stdout, done.stdout
    # a torch whose import fails (a CUDA library missing, say)
    broken = tmp_path / "broken" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    failing = python_wrapper(tmp_path, "failing-python", f'PYTHONPATH="{broken.parent}" exec "{sys.executable}" "$@"')
    done = gpu_check(tmp_path, failing)
    assert done.returncode == 3 and "torch does not import" in done.stdout and "libcudart.so.13" in done.stdout, done.stdout
