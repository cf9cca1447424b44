"""No host read of GPU values inside upstream's per-step loops (each one stalls the CPU until the
GPU's queue drains), checked on FakeCuda, which records every ``.item()`` / ``.tolist()`` /
``float()`` / ``.cpu()`` of a (fake) CUDA tensor; and what FakeCuda itself enforces."""
from types import SimpleNamespace

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.targets.registry import runtime_for
from otca_patch.targets.wan22 import ExpertRouter

from fake_cuda import FakeCuda, cuda_index


class Expert(torch.nn.Module):
    """A stand-in for a Wan transformer: ``hidden_states * scale + timestep``."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(scale))
        self.config = {}  # the router hands on its first expert's config

    def forward(self, hidden_states, timestep, encoder_hidden_states, return_dict=False):
        return (hidden_states * self.scale + timestep.float().view(-1, 1),)


def test_the_wan22_router_reads_the_timesteps_once_per_call(monkeypatch):
    cuda = FakeCuda(monkeypatch, devices=1)
    router = ExpertRouter(Expert(2.0), Expert(3.0), boundary=875.0).to("cuda")
    x, text = torch.ones(3, 4).to("cuda"), torch.zeros(3, 2).to("cuda")
    cuda.syncs.clear()
    for step in (999, 500):  # one expert per call, as upstream's loops call it
        out = router(x[:1], torch.tensor([step], device="cuda"), text[:1], return_dict=False)[0]
        assert cuda_index(out) == 0
    assert [name for name, _ in cuda.syncs] == ["tolist", "tolist"]
    mixed = router(x, torch.tensor([900, 500, 875], device="cuda"), text, return_dict=False)[0]
    cuda.stop()
    assert torch.allclose(mixed, torch.tensor([[2.0 + 900] * 4, [3.0 + 500] * 4, [2.0 + 875] * 4]))
    assert router.served[-1][1] == ["transformer", "transformer_2", "transformer"]


def test_the_sd_runtime_sums_the_loss_on_the_device_and_reads_it_once_per_epoch(monkeypatch, tmp_path):
    cuda = FakeCuda(monkeypatch, devices=1)
    runtime = runtime_for("dancegrpo-sd", OtcaConfig(otca=True, otca_log_dir=str(tmp_path)))
    written = []
    monkeypatch.setattr(runtime, "write_record", lambda **fields: written.append(fields))
    runtime.trained_steps = torch.zeros(1, 1, dtype=torch.long)
    losses = [0.5, 1.5, 2.5]
    for value in losses:  # upstream: one backward per trained step
        runtime.record_loss(torch.tensor(value, device="cuda", requires_grad=True) * 1)
    assert cuda.syncs == []
    runtime.end_epoch()
    assert [name for name, _ in cuda.syncs] == ["__float__"]
    assert written[0]["loss"] == pytest.approx(sum(losses) / 3, abs=1e-6)


def test_fake_cuda_refuses_a_cpu_tensor_meeting_a_cuda_one_and_records_factories(monkeypatch):
    cuda = FakeCuda(monkeypatch, devices=2)
    on_gpu = torch.ones(3).to("cuda")
    assert on_gpu.device == torch.device("cuda", 0) and on_gpu.is_cuda
    assert (on_gpu * 2).device == torch.device("cuda", 0)  # results stay where their inputs are
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*cuda:0 and cpu"):
        on_gpu + torch.ones(3)  # torch.ones without device=: a CPU tensor
    assert cuda.factories and cuda.factories[-1][0] == "ones" and "test_host_syncs.py" in cuda.factories[-1][1]
    assert (on_gpu + torch.tensor(1.0)).device.type == "cuda"  # a 0-dim CPU scalar is allowed, as on CUDA
    with pytest.raises(RuntimeError, match="cuda:0 and cuda:1"):
        on_gpu + torch.zeros(3, device="cuda:1")
    made = len(cuda.factories)
    assert (on_gpu + torch.zeros(3, device=on_gpu.device)).device == torch.device("cuda", 0)
    assert len(cuda.factories) == made  # given device=: not recorded
    weights = torch.nn.Linear(3, 2).to("cuda")
    assert weights(on_gpu).device.type == "cuda"
    with pytest.raises(RuntimeError, match="cuda:0 and cpu"):
        torch.nn.Linear(3, 2)(on_gpu)  # a module left on the CPU
    assert on_gpu.sum().item() == 3.0 and cuda.syncs[-1][0] == "item"
    back = on_gpu.cpu()
    assert back.device.type == "cpu" and on_gpu.device.type == "cuda" and cuda.syncs[-1][0] == "cpu"
    cuda.stop()
    assert torch.ones(2).device.type == "cpu" and (torch.ones(2) + torch.ones(2)).sum() == 4
