"""VideoAlign adapter. The real model (Qwen2-VL 2B + LoRA) cannot run tiny on CPU here, so the
upstream ``VideoVLMRewardInference`` is replaced at the adapter's import boundary
(``import_inference_class``) by a fake that decodes the mp4 files it is given."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from otca_patch.rewards import CheckpointError, RewardSet, load
from otca_patch.rewards import videoalign


class FakeInference:
    """Same constructor and ``reward`` signature as upstream; scores from the decoded videos."""

    instances: list = []

    def __init__(self, load_from_pretrained, load_from_pretrained_step=-1, device="cuda", dtype=torch.bfloat16):
        self.path, self.device, self.dtype = load_from_pretrained, device, dtype
        self.calls = []
        FakeInference.instances.append(self)

    def reward(self, video_paths, prompts, fps=None, num_frames=None, max_pixels=None, use_norm=True):
        import cv2

        self.calls.append((list(video_paths), list(prompts), num_frames, use_norm))
        out = []
        for path, prompt in zip(video_paths, prompts):
            assert Path(path).is_absolute()
            cap = cv2.VideoCapture(path)
            frames = []
            ok, frame = cap.read()
            while ok:
                frames.append(frame)
                ok, frame = cap.read()
            cap.release()
            mean = float(torch.tensor(frames[0]).float().mean()) / 255 if frames else -1.0
            out.append({"VQ": mean, "MQ": float(len(frames)), "TA": float(len(prompt)),
                        "Overall": mean + len(frames) + len(prompt)})
        return out


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    folder = tmp_path / "VideoReward"
    folder.mkdir()
    (folder / "model_config.json").write_text(json.dumps({"data_config": {}, "model_config": {}}))
    (folder / "checkpoint-1").mkdir()
    torch.save({"weight": torch.zeros(2)}, folder / "checkpoint-1" / "model.pth")
    FakeInference.instances = []
    monkeypatch.setattr(videoalign, "import_inference_class", lambda: FakeInference)
    return folder


def videos(batch=2, frames=3, seed=0):
    # Constant frames per sample so the lossy mp4 round trip preserves the mean brightness.
    levels = torch.linspace(0.2, 0.8, batch)
    return levels.view(batch, 1, 1, 1, 1).expand(batch, frames, 3, 32, 48).clone()


def test_three_objectives_in_order(checkpoint):
    model = load("videoalign", checkpoint=checkpoint, fps=8)
    prompts = ["a dancer", "a cat jumping over a fence"]
    out = model.score_all(videos(), prompts)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    assert torch.allclose(out[:, 0], torch.tensor([0.2, 0.8]), atol=0.02)  # VQ column <- 'VQ'
    assert out[:, 1].tolist() == [3.0, 3.0]  # MQ column <- 'MQ': every frame written and decodable
    assert out[:, 2].tolist() == [8.0, 26.0]  # TA column <- 'TA', prompts kept in order
    assert torch.allclose(model.score(videos(), prompts), out.sum(1))
    inferencer = FakeInference.instances[0]
    assert inferencer.path == str(checkpoint) and inferencer.dtype == torch.bfloat16
    paths, called_prompts, _, use_norm = inferencer.calls[0]
    assert called_prompts == prompts and use_norm is True
    assert not any(Path(p).exists() for p in paths)  # temporary files cleaned up


def test_reward_set_expands_videoalign_into_three_columns(checkpoint):
    rs = RewardSet(["videoalign"], checkpoints={"videoalign": checkpoint})
    scores, names = rs.score(videos(3), ["a", "bb", "ccc"])
    assert names == ["videoalign.vq", "videoalign.mq", "videoalign.ta"]
    assert scores.shape == (3, 3)
    assert scores[:, 2].tolist() == [1.0, 2.0, 3.0]
    assert len(FakeInference.instances) == 1  # loaded once, reused


def test_video_input_is_checked(checkpoint):
    model = load("videoalign", checkpoint=checkpoint)
    with pytest.raises(ValueError, match=r"\[B, F, 3, H, W\]"):
        model.score_all(torch.rand(2, 3, 32, 32), ["a", "b"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        model.score_all(videos() * 3, ["a", "b"])
    with pytest.raises(ValueError, match="prompts count mismatch"):
        model.score_all(videos(), ["a"])


def test_folder_without_model_config(tmp_path, monkeypatch):
    monkeypatch.setattr(videoalign, "import_inference_class", lambda: FakeInference)
    with pytest.raises(CheckpointError, match="'videoalign'.*model_config.json.*KwaiVGI/VideoReward"):
        load("videoalign", checkpoint=tmp_path)


def test_no_upstream_checkout_is_a_clear_import_error(tmp_path, monkeypatch):
    monkeypatch.setenv(videoalign.UPSTREAM_ENV, str(tmp_path / "missing"))
    with pytest.raises(ImportError, match="OTCA_UPSTREAM_DANCEGRPO"):
        videoalign.import_inference_class()


def test_real_upstream_import_path(monkeypatch):
    """With a real checkout the adapter imports upstream's class, or names the missing dependency."""
    import sys

    from upstream_snapshots import upstream_checkout

    root = os.environ.get(videoalign.UPSTREAM_ENV)
    if root and not (Path(root) / "fastvideo/models/videoalign/inference.py").is_file():
        monkeypatch.delenv(videoalign.UPSTREAM_ENV)
    UPSTREAM = upstream_checkout("DanceGRPO", videoalign.UPSTREAM_ENV, "fastvideo/models/videoalign/inference.py")
    monkeypatch.setenv(videoalign.UPSTREAM_ENV, str(UPSTREAM))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    try:
        cls = videoalign.import_inference_class()
    except ImportError as exc:
        assert "fastvideo.models.videoalign.inference" in str(exc) and "No module named" in str(exc)
    else:
        assert cls.__name__ == "VideoVLMRewardInference"
    finally:  # leave no half-imported upstream modules behind for other tests
        for name in set(sys.modules) - before:
            if name == "fastvideo" or name.startswith("fastvideo."):
                del sys.modules[name]


class _RunsCode:
    """Unpickling this runs code: it writes the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path(self.marker).write_text, ("unpickled",))


class _LoadsLikeUpstream(FakeInference):
    """Loads checkpoint-*/model.pth as upstream's load_model_from_checkpoint does: no weights_only."""

    def __init__(self, load_from_pretrained, *args, **kwargs):
        super().__init__(load_from_pretrained, *args, **kwargs)
        newest = sorted(Path(load_from_pretrained).glob("checkpoint-*"))[-1]
        torch.load(str(newest / "model.pth"), map_location="cpu")


def test_a_pickled_checkpoint_never_runs(checkpoint, tmp_path, monkeypatch):
    marker = tmp_path / "marker.txt"
    torch.save({"weight": _RunsCode(marker)}, checkpoint / "checkpoint-1" / "model.pth")
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # what torch < 2.6 does by default
    monkeypatch.setattr(videoalign, "import_inference_class", lambda: _LoadsLikeUpstream)
    with pytest.raises(CheckpointError, match=r"model.pth does not load with weights_only=True"):
        load("videoalign", checkpoint=checkpoint)
    assert not marker.exists(), "the pickled payload ran"
    torch.save({"weight": torch.ones(2)}, checkpoint / "checkpoint-1" / "model.pth")
    load("videoalign", checkpoint=checkpoint)  # a plain tensor file loads


def test_a_folder_without_checkpoint_subfolders_is_named(checkpoint):
    import shutil

    shutil.rmtree(checkpoint / "checkpoint-1")
    with pytest.raises(CheckpointError, match=r"no checkpoint-\* folder .*path tried: .*VideoReward"):
        load("videoalign", checkpoint=checkpoint)
