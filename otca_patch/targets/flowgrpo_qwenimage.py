"""FlowGRPO ``scripts/train_qwenimage.py`` (9745241) — the runtime behind ``patches/flowgrpo/train_qwenimage.toml``.

Qwen-Image trains an SDE window as FLUX-Fast does (``flowgrpo_window``: the whole trajectory is
recorded, each batch's window located in it, column ``j`` gets the credit of step ``start + j``),
with two differences the layer sees: no ``Accelerator`` (``main`` starts its own process group with
``fsdp_utils.init_distributed``, under ``torchrun``, and wraps the transformer and the text encoder
in torch FSDP), so the objectives bind on ``main``'s ``device``; and the sampler seeds Python's RNG
with ``process_index`` (0 here) before it draws the window, so the window is the same every call.
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

