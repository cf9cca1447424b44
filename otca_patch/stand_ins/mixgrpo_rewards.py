"""MixGRPO's FLUX trainer on the CPU: HPS-v2.1, CLIP score, ImageReward and PickScore are tiny pixel
scorers carrying upstream's class names (its ``compute_reward`` dispatches on them); UnifiedReward is
upstream's own HTTP client, talking to a stub of its endpoint on 127.0.0.1. Imports the trainer needs
but never calls (``clip``, the ``HPSv2`` source checkout, ``ImageReward``) get stand-ins when absent.
``compute_reward`` reads its scorers' futures in submission order (upstream takes them as they
complete, so its per-model dict order, and the float32 sum of advantages over it, varies from run to
run): vanilla and OTCA runs stay comparable bit for bit.
"""
from __future__ import annotations

import http.server
import json
import math
import sys
import threading
import types

import torch

#: MixGRPO's ``--reward_model`` choices and the models its ``main`` builds for each, in its order
REWARD_MODEL_SETS = {
    "hpsv2": ("HPSClipRewardModel",), "clip_score": ("CLIPScoreRewardModel",),
    "image_reward": ("ImageRewardModel",), "pick_score": ("PickScoreRewardModel",),
    "unified_reward": ("UnifiedRewardModel",), "hpsv2_clip_score": ("HPSClipRewardModel", "CLIPScoreRewardModel"),
    "multi_reward": ("HPSClipRewardModel", "ImageRewardModel", "PickScoreRewardModel", "UnifiedRewardModel"),
}
WEIGHT_FLAGS = {"HPSClipRewardModel": "hps_weight", "CLIPScoreRewardModel": "clip_score_weight",
                "ImageRewardModel": "image_reward_weight", "UnifiedRewardModel": "unified_reward_weight",
                "PickScoreRewardModel": "pick_score_weight"}


# ---- stand-ins for imports the FLUX path never calls
def stand_in_imports() -> list:
    """Modules the trainer imports at load time but this run never calls, where they do not import
    (absent, or missing a dependency of their own); each call raises."""
    import importlib

    def unavailable(*_args, **_kwargs):
        raise RuntimeError("an import stand-in of the MixGRPO smoke run was called")

    made = []
    for name, attributes in (("clip", ("tokenize", "load")), ("ImageReward", ("load",)),
                             ("HPSv2.hpsv2.src.open_clip", ("create_model_and_transforms", "get_tokenizer"))):
        try:
            importlib.import_module(name)
            continue
        except Exception:  # noqa: BLE001 - any failure to import: the stand-in instead
            for loaded in [m for m in sys.modules if m == name.split(".")[0] or m.startswith(name.split(".")[0] + ".")]:
                del sys.modules[loaded]
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            module = sys.modules.setdefault(".".join(parts[:depth]), types.ModuleType(".".join(parts[:depth])))
            module.__path__ = []
            if depth > 1:
                setattr(sys.modules[".".join(parts[:depth - 1])], parts[depth - 1], module)
        for attribute in attributes:
            setattr(sys.modules[name], attribute, unavailable)
        made.append(name)
    return made


# ---- tiny scorers named as upstream's reward models
def pixel_score(image, seed: int, centered: bool = False) -> float:
    """A fixed random linear read-out of the image at 8x8 (a different one per reward model);
    ``centered``: of the pixels minus their mean (a score around 0 whatever the brightness)."""
    import numpy as np

    pixels = torch.from_numpy(np.asarray(image.convert("RGB").resize((8, 8)), dtype=np.float32) / 255.0).flatten()
    weights = torch.randn(pixels.numel(), generator=torch.Generator().manual_seed(seed)) / 8.0
    return float((pixels - pixels.mean() if centered else pixels) @ weights)


def scorer_class(name: str, seed: int, prompts_first: bool = False):
    """A scorer class called ``name``: ``model(images, prompts)`` (``(prompts, images)`` for CLIP score)."""
    def __call__(self, first, second):
        images = second if prompts_first else first
        return [pixel_score(image, seed) for image in images]

    return type(name, (), {"__call__": __call__})


class EndpointStub(http.server.BaseHTTPRequestHandler):
    """UnifiedReward's OpenAI-style endpoint: an 'Alignment Score (1-5)' from the posted image."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        import base64
        import io

        from PIL import Image

        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        url = next(part["image_url"]["url"] for part in payload["messages"][0]["content"] if part["type"] == "image_url")
        image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
        score = 3.0 + 2.0 * math.tanh(4.0 * pixel_score(image, 5, centered=True))  # inside (1, 5), never clipped
        body = json.dumps({"choices": [{"message": {"content": f"Alignment Score (1-5): {score:.6f}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


def serve_endpoint() -> str:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndpointStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def reward_models(names: tuple, url: str) -> list:
    from fastvideo.models.reward_model.unified_reward import UnifiedRewardModel

    seeds = {name: index + 1 for index, name in enumerate(WEIGHT_FLAGS)}
    return [UnifiedRewardModel(api_url=url, default_question_type="semantic", num_workers=1)
            if name == "UnifiedRewardModel" else
            scorer_class(name, seeds[name], prompts_first=name == "CLIPScoreRewardModel")() for name in names]


def in_submission_order(futures, timeout=None):
    """``as_completed`` for ``compute_reward``, in submission order (see the module docstring)."""
    return list(futures)
