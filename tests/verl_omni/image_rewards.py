"""Two reward functions of the kind VeRL-Omni's ``reward.reward_functions`` load (``path`` + ``name``), computed
from the image alone so that the tests recompute them independently: brightness and contrast in [0, 1]."""
import torch


def brightness(solution_image):
    return float(solution_image.float().mean() / 255.0)


def contrast(solution_image):
    return float(solution_image.float().std() / 255.0)


def sometimes_missing(solution_image, extra_info):
    """A reward whose scorer failed for one sample (VeRL-Omni would score it 0 unless required)."""
    if extra_info.get("fail"):
        raise RuntimeError("scorer unavailable")
    return brightness(solution_image)


def as_tensor_rewards(images, functions):
    """``[B, K]`` float64: each function on each image, computed here, not read from any batch."""
    return torch.tensor([[function(image) for function in functions] for image in images], dtype=torch.float64)
