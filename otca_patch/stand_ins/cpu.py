"""What an upstream GPU trainer needs to run one step on this CPU machine, and nothing more."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import socket
import sys
import types

import torch
import torch.distributed as dist

#: Packages DanceGRPO imports beyond otca-patch's own dependencies (the `upstream` extra).
UPSTREAM_EXTRA = ("peft", "liger_kernel", "einops", "wandb", "cv2", "decord")
INSTALL_HINT = "pip install 'otca-patch[upstream]'   (or pip install '<otca-patch checkout>[upstream]')"


def check_upstream_packages() -> None:
    missing = [name for name in UPSTREAM_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"smoke: the upstream trainer imports {', '.join(missing)}, which this environment "
                         f"lacks. Install them with:\n  {INSTALL_HINT}")


def stub_flash_attn() -> bool:
    """Install an import stub for ``flash_attn`` when it is absent (it cannot be built without CUDA).

    DanceGRPO's FLUX path imports it through ``fastvideo.models`` but never calls it; a call
    raises, so a code path that does need it fails loudly instead of computing something else.
    """
    if importlib.util.find_spec("flash_attn") is not None:
        return False

    def unavailable(*_args, **_kwargs):
        raise RuntimeError("flash_attn is an import stub in this CPU smoke run; this code path needs CUDA")

    root = types.ModuleType("flash_attn")
    root.__path__ = []  # a package, so `flash_attn.bert_padding` resolves
    # a spec, because libraries probe with importlib.util.find_spec (no distribution metadata, so
    # transformers still reports flash attention as unavailable)
    root.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None, is_package=True)
    for name in ("flash_attn_varlen_qkvpacked_func", "flash_attn_func", "flash_attn_varlen_func"):
        setattr(root, name, unavailable)
    padding = types.ModuleType("flash_attn.bert_padding")
    padding.__spec__ = importlib.machinery.ModuleSpec("flash_attn.bert_padding", None)
    padding.pad_input = padding.unpad_input = unavailable
    root.bert_padding = padding
    sys.modules.update({"flash_attn": root, "flash_attn.bert_padding": padding})
    return True


#: ``cpu`` (the default) or ``cuda``: where a smoke run's models, tensors and process group live
DEVICE_ENV = "OTCA_SMOKE_DEVICE"


def smoke_device() -> torch.device:
    """The device of this smoke process: the CPU, or with ``OTCA_SMOKE_DEVICE=cuda`` this rank's GPU
    ``cuda:{LOCAL_RANK}`` (scripts/gpu_check.sh)."""
    text = (os.environ.get(DEVICE_ENV) or "cpu").strip().lower()
    if text == "cpu":
        return torch.device("cpu")
    if text != "cuda":
        raise ValueError(f"{DEVICE_ENV}={text!r}: expected cpu or cuda")
    if not torch.cuda.is_available():
        raise ValueError(f"{DEVICE_ENV}=cuda but torch sees no CUDA device here")
    from ..devices import rank_cuda_device

    return rank_cuda_device()


def backend_for(device: torch.device) -> str:
    """The collective backend a trainer uses on ``device``: NCCL on GPUs (as upstream), gloo on the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def init_process_group() -> tuple[int, int]:
    """torchrun's world when launched by it, else a world of one on loopback: NCCL with
    ``OTCA_SMOKE_DEVICE=cuda``, else gloo. Upstream's order: ``init_process_group`` first, then
    ``torch.cuda.set_device(local_rank)`` (DanceGRPO train_grpo_flux.py:629-630, Hunyuan 503-504,
    Wan 550-551, MixGRPO 635-636), so the layer's rank check, which runs as the group is made,
    meets every rank still on the default device."""
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    os.environ.setdefault("WANDB_MODE", "disabled")
    device = smoke_device()
    if not dist.is_initialized():
        dist.init_process_group(backend_for(device))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    average_by_sum_on_gloo()
    return dist.get_rank(), dist.get_world_size()


def accelerate_as_on_gpus() -> None:
    """Make accelerate, on the CPU, choose what it chooses for the same launch on GPUs.

    On N >= 2 GPUs accelerate's state is MULTI_GPU and ``prepare`` wraps the model in DDP (FlowGRPO's
    FLUX loops read ``transformer.module``) over a real process group. Without CUDA, accelerate up to
    1.4 fell back to MULTI_CPU (DDP over gloo); 1.15's ``PartialState._prepare_backend`` picks
    MULTI_CPU only when told the run is on the CPU (``ACCELERATE_USE_CPU``, what ``accelerate launch
    --cpu`` sets) and otherwise NO: each process a world of one, no DDP, no gradient averaging. So a
    CPU smoke of 2+ processes says so. A world of one is left alone: on one GPU accelerate does not
    wrap either (MULTI_CPU would wrap even one process). On a GPU nothing changes."""
    if smoke_device().type == "cpu" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        os.environ["ACCELERATE_USE_CPU"] = "true"


def average_by_sum_on_gloo() -> None:
    """Let ``dist.all_reduce(op=ReduceOp.AVG)`` work on gloo, in this smoke process only.

    DanceGRPO's ``train_one_step`` averages its loss with ``ReduceOp.AVG``, which runs on NCCL on
    GPUs but which gloo rejects on torch 2.5 and 2.6 (the upstream environments' versions). Where
    gloo rejects it (the check fails on every rank alike, before any communication), the average
    is taken as SUM / world size. Only the smoke harness installs this; a training run never does.
    """
    if getattr(dist.all_reduce, "smoke_average_by_sum", False):
        return
    native = dist.all_reduce
    rejected = []  # gloo's answer, learnt on the first AVG call

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if op != dist.ReduceOp.AVG or async_op or dist.get_backend(group) != "gloo":
            return native(tensor, op=op, group=group, async_op=async_op)
        if not rejected:
            try:
                return native(tensor, op=op, group=group)
            except RuntimeError as exc:
                if "AVG" not in str(exc):
                    raise
                rejected.append(True)
        native(tensor, op=dist.ReduceOp.SUM, group=group)
        tensor.div_(dist.get_world_size(group))
        return None

    all_reduce.smoke_average_by_sum = True
    dist.all_reduce = all_reduce


def decode_float_ids_as_transformers_4() -> None:
    """Let a tokenizer decode whole-number float ids on transformers 5, in this smoke process only.

    FlowGRPO 9745241's Kontext and Qwen-Image loops decode prompt ids gathered as floats
    (``gather(prompt_ids).float().cpu().numpy()`` into ``pipeline.tokenizer.batch_decode``). Upstream
    pins transformers 4.40, whose (slow) CLIP and Qwen2 tokenizers take each id as ``int(id)``;
    transformers 5 has only tokenizers-backed ones, whose decode rejects a float (``'float' object
    cannot be interpreted as an integer``), with real weights too. Here a float array or tensor whose
    values are all whole numbers is decoded as integers, as 4.x did; anything else is passed on as
    it was. Only the smoke harness installs this (the GPU machine has transformers 5); a training
    run never does: it runs in upstream's own environment."""
    import numpy as np
    import transformers
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    native = PreTrainedTokenizerBase.decode
    if int(transformers.__version__.split(".")[0]) < 5 or getattr(native, "smoke_whole_float_ids", False):
        return

    def whole(ids):
        if isinstance(ids, torch.Tensor) and ids.is_floating_point():
            ids = ids.detach().cpu().numpy()
        if isinstance(ids, np.ndarray) and np.issubdtype(ids.dtype, np.floating) and np.array_equal(ids, np.round(ids)):
            return ids.astype(np.int64)
        return ids

    def decode(self, token_ids, *args, **kwargs):
        return native(self, whole(token_ids), *args, **kwargs)

    decode.smoke_whole_float_ids, decode.__wrapped__ = True, native
    PreTrainedTokenizerBase.decode = decode


class cpu_as_current_device:
    """Upstream's FSDP helpers ask ``torch.cuda.current_device()``; on this machine that is the CPU."""

    def __enter__(self):
        self._saved = torch.cuda.current_device
        if smoke_device().type == "cpu":  # on a GPU upstream's own answer is right
            torch.cuda.current_device = lambda: torch.device("cpu")
        return self

    def __exit__(self, *exc):
        torch.cuda.current_device = self._saved
        return False
