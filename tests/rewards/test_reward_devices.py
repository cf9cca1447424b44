"""Registry reward models on each rank's own GPU, proven on a fake 2-GPU node (tests/fake_cuda.py):
the weights and the inputs of every rank share one device index, its LOCAL_RANK."""
import tempfile
from pathlib import Path

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.devices import reward_device
from otca_patch.rewards import tiny
from otca_patch.targets.registry import runtime_for
from fake_cuda import FakeCuda

_CLIP = {}


def tiny_clip():
    if not _CLIP:
        root = Path(tempfile.mkdtemp(prefix="otca_devices_"))
        _CLIP["path"] = tiny.build_clip(root)
        _CLIP["arch"] = tiny.register_tiny_open_clip(root)
    return _CLIP["path"], _CLIP["arch"]


def config(tmp_path, **fields):
    path, arch = tiny_clip()
    return OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs"), otca_rewards=("upstream", "clip_t"),
                      otca_reward_ckpt={"clip_t": str(path)}, otca_reward_opt={"clip_t": {"model_name": arch}},
                      **fields)


def one_rank(tmp_path, monkeypatch, rank, announce_local_rank=True, **fields):
    """What one torchrun rank does: the layer installs (the runtime binds its objectives), upstream
    calls torch.cuda.set_device(local_rank), rolls out on that GPU and the layer scores the batch.
    Returns the device indices of (weights at load, the models' inputs at scoring, the runtime)."""
    cuda = FakeCuda(monkeypatch, devices=2)
    if announce_local_rank:
        monkeypatch.setenv("LOCAL_RANK", str(rank))
    else:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    runtime = runtime_for("dancegrpo-flux", config(tmp_path / str(rank), **fields))  # install: before upstream's set_device
    loaded = cuda.indices("module")
    torch.cuda.set_device(rank)  # upstream, train_grpo_flux.py main()
    cuda.moves.clear()
    images = torch.rand(2, 3, tiny.TINY_IMAGE_SIZE, tiny.TINY_IMAGE_SIZE)
    runtime.collect_images(list(images), ["a cat", "a dog"])
    rewards = runtime.rewards(torch.tensor([0.1, 0.2]), torch.device("cuda", rank))  # all_latents' device
    assert rewards.shape == (2, 2)
    assert cuda.moves[-1] == ("tensor", rank)  # the [B, K] rewards go where the trainer works
    return loaded, {index for _, index in cuda.moves[:-1]}, runtime


@pytest.mark.parametrize("fields", [{}, {"otca_reward_device": "cuda:local"}, {"otca_reward_device": "cuda"}])
def test_each_rank_loads_and_scores_on_its_own_gpu(tmp_path, monkeypatch, fields):
    for rank in (0, 1):
        loaded, scored, runtime = one_rank(tmp_path, monkeypatch, rank, **fields)
        assert loaded == {rank}, f"rank {rank}: weights loaded on cuda:{loaded}"
        assert scored == {rank}, f"rank {rank}: inputs moved to cuda:{scored}"
        assert runtime.objectives.reward_set.device == torch.device("cuda", rank)
        monkeypatch.undo()


def test_without_local_rank_the_models_follow_the_trainers_tensors(tmp_path, monkeypatch, capsys):
    loaded, scored, runtime = one_rank(tmp_path, monkeypatch, 1, announce_local_rank=False)
    assert loaded == {0}  # nothing said which GPU: the current one at install
    assert scored == {1}  # moved, with its inputs, to the GPU upstream's latents are on
    assert runtime.objectives.reward_set.device == torch.device("cuda", 1)
    assert "move from cuda:0 to cuda:1" in capsys.readouterr().err


def test_a_pinned_device_stays(tmp_path, monkeypatch):
    loaded, scored, runtime = one_rank(tmp_path, monkeypatch, 1, otca_reward_device="cuda:0")
    assert loaded == {0} and scored == {0}
    assert runtime.objectives.reward_set.device == torch.device("cuda", 0)


def test_reward_device_forms(monkeypatch):
    FakeCuda(monkeypatch, devices=2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert reward_device("cuda:local") == reward_device("cuda") == reward_device("") == torch.device("cuda", 1)
    assert reward_device("cuda:0") == torch.device("cuda", 0) and reward_device("cpu") == torch.device("cpu")
    assert reward_device("", "cuda:0") == torch.device("cuda", 0)  # the trainer's known device wins
    assert reward_device("", "cuda") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="--otca_reward_device 'gpu1': not a device"):
        reward_device("gpu1")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ValueError, match="LOCAL_RANK=2 but this process sees 2 CUDA device"):
        reward_device("cuda:local")


def test_without_cuda_the_cpu_is_used_and_cuda_local_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert reward_device("") == torch.device("cpu")
    with pytest.raises(ValueError, match="--otca_reward_device cuda:local: no CUDA device is available"):
        reward_device("cuda:local")
