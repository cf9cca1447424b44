"""The layer's share of a smoke run's training step, in time and memory (``OTCA_SMOKE_METER=1``,
set by scripts/gpu_check.sh).

Every public method of the installed runtime is timed (outermost calls only: a hook that calls
another runtime method is counted once); a step ends at each run-log record (``write_record``: one
per training step on every target). Per step: the layer's seconds over the step's seconds, and on
CUDA the layer's peak memory above what was allocated when its call began, over the step's peak
above what was allocated when the step began (``torch.cuda.max_memory_allocated``). The figures go
to ``layer_meter_rank<r>.json`` in the run folder.
"""
from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import torch

METER_ENV = "OTCA_SMOKE_METER"


def wanted() -> bool:
    return os.environ.get(METER_ENV, "") not in ("", "0")


class LayerMeter:
    def __init__(self, runtime, out_file: Path, device: torch.device):
        self.out_file, self.device, self.steps, self.depth, self.recorded = Path(out_file), device, [], 0, False
        self._begin_step()
        for name in dir(type(runtime)):
            attribute = getattr(runtime, name, None)
            if name.startswith("_") or not callable(attribute) or name.startswith(("wrap_", "watch_")):
                continue  # wrap_* / watch_* ran at import; what they return calls the methods below
            setattr(runtime, name, self._timed(attribute, ends_step=name == "write_record"))

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else 0

    def _peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else 0

    def _reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def _begin_step(self) -> None:
        self._sync()
        self._reset_peak()
        self.step_start, self.step_base, self.step_peak = time.perf_counter(), self._allocated(), 0
        self.layer_seconds, self.layer_peak = 0.0, 0

    def _timed(self, method, ends_step: bool):
        meter = self

        @functools.wraps(method)
        def timed(*args, **kwargs):
            meter.recorded = meter.recorded or ends_step  # a run-log record ends the step (when the outer call does)
            if meter.depth:
                return method(*args, **kwargs)
            meter._sync()
            meter.step_peak = max(meter.step_peak, meter._peak() - meter.step_base)
            base, start = meter._allocated(), time.perf_counter()
            meter._reset_peak()
            meter.depth += 1
            try:
                return method(*args, **kwargs)
            finally:
                meter.depth -= 1
                meter._sync()
                meter.layer_seconds += time.perf_counter() - start
                peak = meter._peak()
                meter.layer_peak = max(meter.layer_peak, peak - base)
                meter.step_peak = max(meter.step_peak, peak - meter.step_base)
                if meter.recorded:
                    meter.recorded = False
                    meter._end_step()

        return timed

    def _end_step(self) -> None:
        seconds = time.perf_counter() - self.step_start
        self.steps.append({"seconds": seconds, "layer_seconds": self.layer_seconds,
                           "time_ratio": self.layer_seconds / seconds if seconds > 0 else None,
                           "peak_bytes": self.step_peak, "layer_peak_bytes": self.layer_peak,
                           "memory_ratio": self.layer_peak / self.step_peak if self.step_peak > 0 else None})
        self.out_file.write_text(json.dumps({"device": str(self.device), "steps": self.steps}, indent=2))
        self._begin_step()


def install(module, out_dir: Path) -> None:
    """Meter the runtime of a patched upstream ``module`` (nothing for a vanilla run)."""
    from ..hooks.rewrite import RUNTIME_NAME
    from ..stand_ins.cpu import smoke_device

    runtime = getattr(module, RUNTIME_NAME, None)
    if runtime is None or not wanted():
        return
    rank = int(os.environ.get("RANK", "0") or 0)
    LayerMeter(runtime, Path(out_dir) / f"layer_meter_rank{rank}.json", smoke_device())


def summary(run_dir: Path) -> str:
    """One line: the layer's time and memory per step as ratios to the step, over every rank's
    ``layer_meter_rank<r>.json`` in ``run_dir`` (steady state: the last step; the largest over ranks)."""
    files = sorted(Path(run_dir).glob("layer_meter_rank*.json"))
    if not files:
        return "layer: no meter file (was OTCA_SMOKE_METER=1 set, and --otca given?)"
    last = [json.loads(f.read_text())["steps"][-1] for f in files]
    time_ratio = max(step["time_ratio"] or 0.0 for step in last)
    memory = [step["memory_ratio"] for step in last if step["memory_ratio"] is not None]
    memory_text = f"memory {max(memory):.3f} of the step's peak" if memory else "memory n/a (CPU)"
    seconds = max(step["seconds"] for step in last)
    return f"layer: time {time_ratio:.3f} of the step ({seconds:.2f} s), {memory_text}"


if __name__ == "__main__":
    import sys

    print(summary(Path(sys.argv[1])))
