"""What every smoke target shares: loading the upstream file (untouched or rewritten) and the test
probe that records each loss term's log-probs."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from ..config import OtcaConfig


def load_upstream(upstream_dir: Path, relative_file: str, config: OtcaConfig, module_name: str):
    """The upstream module: untouched for vanilla, rewritten by the layer otherwise."""
    path = upstream_dir / relative_file
    if not path.is_file():
        raise SystemExit(f"smoke: {path} does not exist; pass a DanceGRPO checkout")
    sys.path.insert(0, str(upstream_dir))
    if config.active:
        from ..hooks.spec import spec_for_script
        from ..launch.runner import load_patched_module

        return load_patched_module(str(path), spec_for_script(path), config, module_name)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class TermRecorder:
    """Test probe (not part of the layer): records each rollout's log-probs and each training call's
    new log-probs by wrapping the upstream module's functions, so a test can rebuild every loss term.

    log_prob_index: where ``all_log_probs [B, S]`` sits in ``sample_reference_model``'s result.
    """

    def __init__(self, module, log_prob_index: int):
        self.rollout_log_probs, self.new_log_probs = [], []
        sample, grpo = module.sample_reference_model, module.grpo_one_step

        def sample_reference_model(*args, **kwargs):
            result = sample(*args, **kwargs)
            self.rollout_log_probs.append(result[log_prob_index].detach().clone())
            return result

        def grpo_one_step(*args, **kwargs):
            new = grpo(*args, **kwargs)
            self.new_log_probs.append(new.detach().clone())
            return new

        module.sample_reference_model, module.grpo_one_step = sample_reference_model, grpo_one_step

    def save(self, path: Path) -> None:
        torch.save({"rollout_log_probs": self.rollout_log_probs,
                    "new_log_probs": [t.reshape(-1) for t in self.new_log_probs]}, path)


def cast_inputs_to_weights(model: torch.nn.Module) -> None:
    """Upstream runs its transformer under ``torch.autocast("cuda", bfloat16)`` on bf16 noise; on the
    CPU that autocast is off, so floating inputs are cast to the weights' dtype at the model's entry
    (bf16 -> fp32 is exact), as autocast would have reconciled them."""
    dtype = next(model.parameters()).dtype

    def cast(_module, args, kwargs):
        convert = lambda v: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        return tuple(map(convert, args)), {k: convert(v) for k, v in kwargs.items()}

    model.register_forward_pre_hook(cast, with_kwargs=True)
