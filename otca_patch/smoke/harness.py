"""What every smoke target shares: its sizes (the spec table's ``sizes`` and ``"{size}"`` values), loading
the upstream file (untouched or rewritten), the run folder, FSDP, the optimizer and smoke.json. A test probe (``--probe FILE.py:NAME``, e.g. the loss-term
recorder of tests/upstream/term_probe.py) is built from the upstream module and saved per rank."""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from ..flags import flag
from .sizes import SmokeSizes


@dataclass
class RolloutSizes(SmokeSizes):
    """DanceGRPO-family samplers (DanceGRPO's trainers, MixGRPO): small enough for seconds per step on 2
    CPU cores."""

    sampling_steps: int = flag("denoising steps of each rollout", 6)
    num_generations: int = flag("samples per prompt (one prompt group)", 4)
    image_size: int = flag("image side in pixels (latents are a eighth of it)", 32)
    timestep_fraction: float = flag("the part of the steps that trains", 0.6)
    eta: float = flag("the SDE sampler's noise level", 0.3)
    shift: float = flag("the timestep schedule's shift", 3.0)


def filled(value, sizes):
    """A spec's override ``value`` with each ``"{size}"`` string replaced by that size's value."""
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        return getattr(sizes, value[1:-1])
    if isinstance(value, (list, tuple)):
        return [filled(item, sizes) for item in value]
    if isinstance(value, dict):
        return {key: filled(item, sizes) for key, item in value.items()}
    return value


def sizes_named(value) -> set:
    """The sizes an override ``value`` names (``"{size}"`` strings, at any depth)."""
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        return {value[1:-1]}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return set().union(*(sizes_named(item) for item in items))


def sizes_type(where: str, base: type, table: dict, overrides) -> type:
    """``base`` with a spec table's ``sizes`` (new flags, or new defaults of its own); ``overrides`` may
    name only sizes it has (``where``: the spec and table, for the one-line error)."""
    sizes = make_dataclass("Sizes", [(key, type(value), field(default=value)) for key, value in table.items()],
                           bases=(base,)) if table else base
    unknown = sizes_named(overrides) - {f.name for f in fields(sizes)}
    if unknown:
        raise ValueError(f"{where} overrides name sizes it does not have: {', '.join(sorted(unknown))}")
    return sizes


def load_upstream(upstream_dir: Path, relative_file: str, config: OtcaConfig, module_name: str):
    """The upstream module: untouched for vanilla, rewritten by the layer otherwise. A file that
    ``--otca_target`` names for this target's spec (a copy of the trainer) replaces the upstream one,
    with or without the layer, so both sides of an A/B run the same file."""
    from dataclasses import replace

    from ..hooks.explicit_targets import FLAG, resolve_in, spec_named
    from ..hooks.select import spec_choice_for_script
    from ..hooks.spec import load_specs

    path = upstream_dir / relative_file
    # the spec the file's content picks (several upstreams share a path); a file no spec holds on
    # stops an --otca run here, before anything loads
    choice = spec_choice_for_script(path) if path.is_file() and config.active else None
    spec, reason = (choice.spec, choice.reason) if choice is not None else (None, "")
    for chosen, name in config.otca_target.items():
        named = spec_named(name, load_specs())
        if named.file == relative_file:  # a copy of this smoke's trainer replaces it
            path = resolve_in(chosen, upstream_dir)
            spec, reason = replace(named, file=str(path)), f"named by {FLAG}"
    if not path.is_file():
        raise SystemExit(f"otca-patch smoke: error: {path} does not exist; pass an upstream checkout that has it")
    sys.path.insert(0, str(upstream_dir))
    if config.active:
        from ..launch.runner import load_patched_module

        from ..tools import layer_meter

        module = load_patched_module(str(path), spec, config, module_name, reason)
        layer_meter.install(module, Path.cwd())  # the run folder (OTCA_SMOKE_METER=1 only)
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def call_by_signature(function, available: dict):
    """Call an upstream function with the arguments its signature names, taken from ``available``
    by parameter name (extra entries are ignored), so a smoke run works on any upstream commit whose
    hook points hold, whatever the parameters' order or number (e.g. DanceGRPO's FLUX
    ``train_one_step`` gained ``ema_handler`` after its first release). A parameter without a default
    that ``available`` lacks is a ``ValueError`` naming it."""
    parameters = inspect.signature(function).parameters  # follows __wrapped__ through the layer's wrapper
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    missing = [name for name, p in parameters.items()
               if name not in available and p.default is inspect.Parameter.empty and p.kind not in variadic]
    if missing:
        raise ValueError(f"upstream {function.__name__}() takes {', '.join(missing)}, which the smoke run does not "
                         f"provide (it provides {', '.join(available)}); the smoke target needs updating for this commit")
    positional = [available[name] for name, p in parameters.items()
                  if p.kind is inspect.Parameter.POSITIONAL_ONLY and name in available]
    keywords = {name: available[name] for name, p in parameters.items()
                if p.kind not in variadic and p.kind is not inspect.Parameter.POSITIONAL_ONLY and name in available}
    return function(*positional, **keywords)


def cast_inputs_to_weights(model: torch.nn.Module) -> None:
    """Upstream runs its transformer under ``torch.autocast("cuda", bfloat16)`` on bf16 noise; on the
    CPU that autocast is off, so floating inputs are cast to the weights' dtype at the model's entry
    (bf16 -> fp32 is exact), as autocast would have reconciled them."""
    dtype = next(model.parameters()).dtype

    def cast(_module, args, kwargs):
        convert = lambda v: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        return tuple(map(convert, args)), {k: convert(v) for k, v in kwargs.items()}

    model.register_forward_pre_hook(cast, with_kwargs=True)


def enter_run_folder(out_dir: Path, outputs: str) -> tuple[int, int]:
    """The CPU stand-ins a DanceGRPO step needs (packages checked, flash_attn stubbed, a gloo world),
    then ``out_dir`` as the working directory, where upstream writes ``./<outputs>/`` and its reward
    logs. Returns (rank, world size)."""
    from ..stand_ins import cpu as environment

    environment.check_upstream_packages()
    environment.stub_flash_attn()
    rank, world_size = environment.init_process_group()
    out_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(out_dir)
    Path(outputs).mkdir(exist_ok=True)
    return rank, world_size


def fsdp_wrap(transformer: torch.nn.Module) -> torch.nn.Module:
    """Upstream's own FSDP wrapping (``get_dit_fsdp_kwargs``, full sharding, fp32) on the CPU."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from fastvideo.utils.fsdp_util import get_dit_fsdp_kwargs

    from ..stand_ins import cpu as environment

    with environment.cpu_as_current_device():
        fsdp_kwargs, _ = get_dit_fsdp_kwargs(transformer, "full", False, False, "fp32")
        return FSDP(transformer, **fsdp_kwargs)


def optimizer_and_schedule(model: torch.nn.Module, learning_rate: float):
    """AdamW and a constant schedule as DanceGRPO's trainers build them."""
    from diffusers.optimization import get_scheduler

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate,
                                  betas=(0.9, 0.999), weight_decay=1e-4, eps=1e-8)
    return optimizer, get_scheduler("constant", optimizer=optimizer, num_warmup_steps=0, num_training_steps=10**6)


def on_device(*modules):
    """``modules`` moved to the smoke device (the CPU unless ``OTCA_SMOKE_DEVICE=cuda``); returns them."""
    from ..stand_ins.cpu import smoke_device

    device = smoke_device()
    moved = tuple(module.to(device) for module in modules)
    return moved[0] if len(moved) == 1 else moved


def device_loader(loader):
    """Upstream's loader wrapper moves each batch to the trainer's device: so does this one."""
    from ..stand_ins.cpu import smoke_device

    device = smoke_device()
    for batch in loader:
        yield tuple(item.to(device) if isinstance(item, torch.Tensor) else item for item in batch)


def inputs_on_device(inputs: dict) -> dict:
    """Arguments that come from upstream's data loader, on the smoke device: tensors moved, a loader
    (an iterator of batches) wrapped by ``device_loader``."""
    from ..stand_ins.cpu import smoke_device

    device = smoke_device()
    return {name: value.to(device) if isinstance(value, torch.Tensor)
            else device_loader(value) if hasattr(value, "__next__") else value for name, value in inputs.items()}


def report_step(rank: int, step: int, loss, grad_norm, **extra) -> dict:
    """One smoke.json step entry; rank 0 prints it."""
    if rank == 0:
        print(f"smoke step {step}: loss {loss!r} grad_norm {grad_norm!r}", flush=True)
    return {"loss": float(loss), "grad_norm": float(grad_norm), **extra}


def finish(out_dir: Path, config: OtcaConfig, rank: int, world_size: int, steps: list,
           probe, **extra) -> dict:
    """Write ``smoke.json`` (rank 0) and what the test probe recorded (each rank); returns the result."""
    result = {"otca": config.otca, "observe": config.otca_observe,
              "mode": config.otca_mode if config.active else None, **extra, "world_size": world_size,
              "steps": steps}
    if probe is not None:
        probe.save(out_dir / f"terms_rank{rank}.pt")
    if rank == 0:
        (out_dir / "smoke.json").write_text(json.dumps(result, indent=2))
    return result
