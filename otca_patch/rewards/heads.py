"""The linear MLP head shared by the LAION aesthetic predictor v2 and ImageReward.

Both publish the same ``nn.Sequential`` under ``layers``: Linear(D,1024), Dropout, Linear(1024,128),
Dropout, Linear(128,64), Dropout, Linear(64,16), Linear(16,1) -- no activations, so the Linear
modules sit at indices 0, 2, 4, 6, 7. Widths are read from the state dict so tiny test heads load
through the same code as the published ones.
"""
from __future__ import annotations

from typing import Dict, Mapping

import torch
from torch import nn

#: Sequential index -> dropout probability after that Linear (the published values; inactive in eval).
_DROPOUT_AFTER = {0: 0.2, 2: 0.2, 4: 0.1}
LINEAR_INDICES = (0, 2, 4, 6, 7)


class LinearHead(nn.Module):
    """``layers``: the published Sequential. ``forward([N, D]) -> [N, 1]``."""

    def __init__(self, widths):
        super().__init__()
        if len(widths) != len(LINEAR_INDICES) + 1:
            raise ValueError(f"LinearHead needs {len(LINEAR_INDICES) + 1} widths, got {widths}")
        modules = []
        for i, (w_in, w_out) in zip(LINEAR_INDICES, zip(widths[:-1], widths[1:])):
            modules.append(nn.Linear(w_in, w_out))
            if i in _DROPOUT_AFTER:
                modules.append(nn.Dropout(_DROPOUT_AFTER[i]))
        self.layers = nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)

    @staticmethod
    def widths_from_state_dict(state_dict: Mapping[str, torch.Tensor], prefix: str = "layers.") -> list:
        """[D, 1024, 128, 64, 16, 1] for the published head; KeyError if a Linear is absent."""
        weights = [state_dict[f"{prefix}{i}.weight"] for i in LINEAR_INDICES]
        return [int(weights[0].shape[1])] + [int(w.shape[0]) for w in weights]


def head_keys(state_dict: Mapping[str, torch.Tensor], prefix: str) -> Dict[str, torch.Tensor]:
    """The entries under ``prefix`` with the prefix removed."""
    return {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
