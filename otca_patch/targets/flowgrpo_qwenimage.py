"""FlowGRPO ``scripts/train_qwenimage.py`` and ``scripts/train_qwenimage_edit.py`` (9745241) — the
runtime behind ``patches/flowgrpo/_qwenimage.toml`` (their skeleton).

Qwen-Image trains an SDE window as FLUX-Fast does (``flowgrpo_window``: the whole trajectory is
recorded, each batch's window located in it, column ``j`` gets the credit of step ``start + j``),
with one difference the layer sees: no ``Accelerator`` (``main`` starts its own process group with
``fsdp_utils.init_distributed``, under ``torchrun``, and wraps the transformer and the text encoder
in torch FSDP), so the objectives bind on ``main``'s ``device``. The sampler seeds Python's RNG with
its ``process_index`` before it draws the window (0 in Qwen-Image: the same window every call; the
rank in Qwen-Image-Edit: a window per process); each batch's window is located where it lies.
The gather of the layer's small tensors runs on the default process group: the one upstream built.
"""
from __future__ import annotations

from types import SimpleNamespace

from .flowgrpo_window import WindowedFlowRuntime


class QwenImageRuntime(WindowedFlowRuntime):
    """Qwen-Image: the window skeleton, bound on ``main``'s device."""

    # ---- hook: bind_objectives (main, after init_distributed, before set_seed)
    def bind_on(self, upstream_config, device) -> None:
        """As ``bind``, on the device ``main`` chose (no accelerator)."""
        self.bind(upstream_config, SimpleNamespace(device=device))

