"""FlowGRPO ``scripts/train_flux_fast.py`` (9745241) — the runtime behind ``patches/flowgrpo/train_flux_fast.toml``.

The FLUX trainer (``flowgrpo_flux``) with the Fast sampler: ``pipeline_with_logprob`` draws a window
start ``s`` per call, runs ``sde_window_size`` SDE steps from there and ODE steps elsewhere, and
returns only the window's states, log-probs and timesteps; the loop trains columns ``0 .. W-1``
(``num_train_timesteps = sde_window_size``) and does not shuffle. The window family runtime
(``flowgrpo_window``) records the whole trajectory, locates each batch's window in it and gives
column ``j`` the credit of step ``s + j``.
"""
from __future__ import annotations

from .descriptor import Target
from .flowgrpo_window import WindowedFlowRuntime


class FluxFastRuntime(WindowedFlowRuntime):
    """FLUX-Fast follows the window skeleton: the family runtime does it all."""


TARGET = Target("flowgrpo-flux-fast", FluxFastRuntime, outputs=("logs", "checkpoints"),
                smoke="otca_patch.smoke.flowgrpo_flux_fast", smoke_objectives=("jpeg_compressibility", "clip_t"))
