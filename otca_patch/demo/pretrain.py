"""The base model: flow-matching pre-training on the corrupted mixture of the synthetic task
(``data.corrupted_render``), cached by a hash of its config so that a second run (and ``ablate`` /
``proxy``) reuses it."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import torch

from .config import BASE_MODEL_FORMAT, DemoConfig
from .data import corrupted_render, sample_prompts
from .files import atomic_torch_save
from .model import TinyFlux, pack
from .progress import progress_bar


def flow_matching_loss(model: TinyFlux, prompt_ids: torch.Tensor, images: torch.Tensor,
                       noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Rectified-flow loss ``|v(z_sigma) - (noise - x)|^2`` with ``z_sigma = (1 - sigma) x + sigma noise``.

    ``prompt_ids [B, 4]``, ``images`` and ``noise`` ``[B, N, 4C]`` (packed), ``sigma [B]``.
    """
    s = sigma.view(-1, 1, 1)
    z = (1 - s) * images + s * noise
    return torch.nn.functional.mse_loss(model(z, sigma, prompt_ids), noise - images)


def pretrain(model: TinyFlux, config: DemoConfig) -> list[float]:
    """Train ``model`` in place for ``config.pretrain_steps``; returns the loss per step."""
    generator = torch.Generator().manual_seed(config.base_seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.pretrain_lr, weight_decay=0.0)
    warmup = max(1, config.pretrain_steps // 20)
    # linear warm-up then cosine decay: a short schedule that still ends at a sharp model
    schedule = lambda step: min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / max(1, config.pretrain_steps)))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    losses = []
    model.train()
    bar = progress_bar(range(config.pretrain_steps), config, desc="pre-train base model")
    for _ in bar:
        prompts = sample_prompts(config.pretrain_batch, generator)
        images = pack(corrupted_render(prompts, config.image_size, config.corrupt_prob, generator,
                                         config.task_regime.corruptions))
        noise = torch.randn(images.shape, generator=generator)
        sigma = torch.rand(config.pretrain_batch, generator=generator)
        loss = flow_matching_loss(model, prompts, images, noise, sigma)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if hasattr(bar, "set_postfix") and len(losses) % 50 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / 50:.4f}")
    model.eval()
    return losses


def build_model(config: DemoConfig) -> TinyFlux:
    """A freshly initialised model; the initialisation depends on ``base_seed`` only."""
    torch.manual_seed(config.base_seed)
    return TinyFlux(config)


def base_model_path(config: DemoConfig) -> Path:
    folder = Path(config.base_cache or config.out)
    return folder / f"base_model-{config.base_model_key()}.pt"


def load_or_train_base_model(config: DemoConfig, log=print) -> tuple[TinyFlux, dict]:
    """The cached base model for ``config`` (trained and saved atomically when absent).

    Returns the model (eval mode) and ``info``: ``path``, ``cached`` (bool), ``final_loss``.
    A cache file that cannot be read is left in place and a new one is trained beside it.
    """
    path = base_model_path(config)
    model = build_model(config)
    found = _read_cache(path, config, log)
    if found is not None:
        cached_path, saved = found
        model.load_state_dict(saved["state_dict"])
        model.eval()
        return model, {"path": str(cached_path), "cached": True, "final_loss": saved.get("final_loss")}
    if path.exists():  # unreadable or from another format: keep it, write beside it
        path = path.with_name(path.stem + "-retrained.pt")
    log(f"training the base model ({config.pretrain_steps} flow-matching steps); it will be cached at {path}")
    losses = pretrain(model, config)
    tail = losses[-50:]
    final_loss = sum(tail) / len(tail) if tail else None
    atomic_torch_save({"format": BASE_MODEL_FORMAT, "key": config.base_model_key(), "config": config.to_dict(),
                       "state_dict": model.state_dict(), "final_loss": final_loss, "losses": losses}, path)
    return model, {"path": str(path), "cached": False, "final_loss": final_loss}


def _read_cache(path: Path, config: DemoConfig, log) -> Optional[tuple[Path, dict]]:
    candidates = [path, path.with_name(path.stem + "-retrained.pt")]
    for candidate in candidates:
        if not candidate.exists():
            continue
        try:
            saved = torch.load(candidate, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported, never deleted
            log(f"warning: cached base model {candidate} is unreadable ({exc}); it is kept, not used")
            continue
        if isinstance(saved, dict) and saved.get("format") == BASE_MODEL_FORMAT and saved.get("key") == config.base_model_key():
            return candidate, saved
        log(f"warning: {candidate} does not match this configuration; it is kept, not used")
    return None
