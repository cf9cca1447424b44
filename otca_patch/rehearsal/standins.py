"""What the rehearsal replaces inside upstream's processes so that its launch runs here, and only
that (installed by ``startup/sitecustomize.py`` as torch, hpsv2's open_clip and DanceGRPO's
HunyuanVideo modeling module are imported).

On the CPU (``cpu``): nccl becomes gloo; ``torch.cuda.set_device`` does nothing and
``torch.cuda.current_device()`` is the CPU; a ``torch.load`` onto ``cuda:*`` loads onto the CPU;
``torch.autocast("cuda", dtype)`` is CPU autocast in the same dtype (bfloat16, CPU autocast's own,
where upstream names none); ``ReduceOp.AVG`` on gloo is SUM / world size; ``flash_attn`` is an
import stub. On either device: hpsv2's ``ViT-H-14`` architecture is the tiny one the rehearsal's
HPS checkpoint files were written with (the name is hard-coded in upstream's ``main``). For
DanceGRPO's HunyuanVideo trainer (``$OTCA_REHEARSAL_IMPORT_STUBS=dancegrpo-hunyuan``): VideoAlign's
inference module is a stand-in, ``flash_attn_no_pad`` is masked attention where flash_attn is the
stub, and on the CPU a module moved to ``cuda`` stays on the CPU."""
from __future__ import annotations

import json
import os

#: the tiny architecture hpsv2's ViT-H-14 stands for (its config file, written by the family module)
TINY_HPS_CONFIG_VARIABLE = "OTCA_REHEARSAL_HPS_CONFIG"
#: "mixgrpo": the modules MixGRPO's trainer imports but a single-reward run never calls get import
#: stand-ins where they do not import (OpenAI's ``clip``, a git install; ``ImageReward``, which needs it)
IMPORT_STUBS_VARIABLE = "OTCA_REHEARSAL_IMPORT_STUBS"
#: "dancegrpo-hunyuan" in $IMPORT_STUBS_VARIABLE: DanceGRPO's HunyuanVideo trainer's stand-ins
HUNYUAN = "dancegrpo-hunyuan"
REPLACEMENTS_HUNYUAN = [
    "fastvideo.models.videoalign.inference.VideoVLMRewardInference (Qwen2-VL 2B + LoRA from ./videoalign_ckpt) "
    "-> otca_patch.stand_ins.video_align.StubVideoAlign: it re-reads each mp4 upstream wrote and returns "
    "deterministic VQ, MQ and TA from its pixels and prompt, in VideoAlign's return format",
    "flash_attn_no_pad in fastvideo.models.hunyuan_hf.modeling_hunyuan (flash-attn's CUDA kernel), where "
    "flash_attn is not installed -> the same padded-key attention through scaled_dot_product_attention",
]
REPLACEMENTS_HUNYUAN_CPU = [
    "Module.to('cuda') (load_vae's) -> the CPU",
]

REPLACEMENTS_CPU = [
    "dist.init_process_group('nccl') -> gloo",
    "torch.cuda.set_device -> no-op; torch.cuda.current_device() -> the CPU",
    "torch.load(map_location='cuda:*') -> the CPU",
    "torch.autocast('cuda', dtype) -> CPU autocast in that dtype (bfloat16 where none is named)",
    "dist.all_reduce(op=AVG) on gloo -> SUM / world size where gloo rejects AVG",
    "flash_attn (where not installed) -> an import stub that raises if called",
]
PINNED_STRUCTURE = ("DataLoader(pin_memory=True) batches -> the structure upstream's torch 2.5 pinning gives "
                    "them on a GPU (a tuple becomes a list: DanceGRPO's train_one_step requires its captions "
                    "as a list), without pinning")


def after_torch(device: str) -> None:
    import torch

    from ..stand_ins.cpu import average_by_sum_on_gloo, stub_flash_attn

    stub_flash_attn()  # where flash_attn is installed (a GPU machine may have it) it is left alone
    if os.environ.get(IMPORT_STUBS_VARIABLE) == "mixgrpo":
        from ..stand_ins.mixgrpo_rewards import stand_in_imports

        stand_in_imports()
    if os.environ.get(IMPORT_STUBS_VARIABLE) == HUNYUAN:
        _stand_in_videoalign()
        if device == "cpu":
            _modules_to_cuda_stay_on_cpu(torch)
    _pinned_structure(torch)
    if device != "cpu":
        return
    import torch.distributed as dist

    _gloo_for_nccl(dist)
    torch.cuda.set_device = lambda *_args, **_kwargs: None
    torch.cuda.current_device = lambda: "cpu"  # a name, as code that formats or parses the index expects
    torch.cuda.synchronize = lambda *_args, **_kwargs: None
    _load_onto_cpu(torch)
    _cpu_autocast(torch)
    average_by_sum_on_gloo()


def _gloo_for_nccl(dist) -> None:
    native = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if isinstance(backend, str) and "nccl" in backend:
            backend = "gloo"
        if isinstance(kwargs.get("backend"), str) and "nccl" in kwargs["backend"]:
            kwargs["backend"] = "gloo"
        return native(backend, *args, **kwargs)

    dist.init_process_group = init_process_group


def _load_onto_cpu(torch) -> None:
    native = torch.load

    def load(*args, map_location=None, **kwargs):
        if str(map_location).startswith("cuda"):
            map_location = "cpu"
        return native(*args, map_location=map_location, **kwargs)

    torch.load = load


def _cpu_autocast(torch) -> None:
    native = torch.amp.autocast

    class autocast(native):
        def __init__(self, device_type, dtype=None, *args, **kwargs):
            if str(device_type).startswith("cuda"):
                device_type, dtype = "cpu", dtype or torch.bfloat16
            super().__init__(device_type, dtype, *args, **kwargs)

    torch.autocast = torch.amp.autocast = autocast


def pins_as_torch_25(torch) -> bool:
    """Whether this torch, on this machine, gives a pinned batch torch 2.5's structure already: a
    GPU-less machine pins nothing, and torch from 2.6 on keeps a tuple a tuple."""
    from torch.utils.data._utils.pin_memory import pin_memory

    return torch.cuda.is_available() and isinstance(pin_memory(("caption",)), list)


def _as_pinned_by_torch_25(data):
    """torch 2.5's ``pin_memory`` structure rule, without the pinning: mappings and sequences are
    rebuilt, a tuple (not a named tuple) as a list."""
    import collections.abc

    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: _as_pinned_by_torch_25(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_as_pinned_by_torch_25(v) for v in data))
    if isinstance(data, tuple):
        return [_as_pinned_by_torch_25(v) for v in data]
    if isinstance(data, collections.abc.Sequence):
        return type(data)([_as_pinned_by_torch_25(v) for v in data])
    return data


def _pinned_structure(torch) -> None:
    if pins_as_torch_25(torch):
        return
    from torch.utils.data import DataLoader

    native = DataLoader.__iter__

    def iterate(self):
        batches = native(self)
        if not self.pin_memory:
            return batches
        return (_as_pinned_by_torch_25(batch) for batch in batches)

    DataLoader.__iter__ = iterate


def after_hpsv2_open_clip(device: str) -> None:
    """Upstream builds hpsv2's ``ViT-H-14``; here that name is the tiny architecture (its config
    file is ``$OTCA_REHEARSAL_HPS_CONFIG``)."""
    config = os.environ.get(TINY_HPS_CONFIG_VARIABLE)
    if not config:
        return
    import sys

    for name in ("hpsv2.src.open_clip.factory", "HPSv2.hpsv2.src.open_clip.factory"):  # MixGRPO: its checkout's
        if name in sys.modules:
            sys.modules[name]._MODEL_CONFIGS["ViT-H-14"] = json.loads(open(config).read())


def _stand_in_videoalign() -> None:
    """``fastvideo.models.videoalign.inference`` as a module whose ``VideoVLMRewardInference`` takes
    upstream's constructor arguments and scores with the smoke's ``StubVideoAlign`` (the real module
    is never imported: it needs trl and a Qwen2-VL checkpoint)."""
    import sys
    import types

    from ..stand_ins.video_align import StubVideoAlign

    class VideoVLMRewardInference(StubVideoAlign):
        def __init__(self, load_from_pretrained, load_from_pretrained_step=-1, device="cuda", dtype=None):
            self.load_from_pretrained, self.device, self.dtype = load_from_pretrained, device, dtype

    module = types.ModuleType("fastvideo.models.videoalign.inference")
    module.VideoVLMRewardInference = VideoVLMRewardInference
    sys.modules[module.__name__] = module


def _modules_to_cuda_stay_on_cpu(torch) -> None:
    native = torch.nn.Module.to

    def to(self, *args, **kwargs):
        args = tuple("cpu" if _is_cuda(a) else a for a in args)
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        return native(self, *args, **kwargs)

    torch.nn.Module.to = to


def _is_cuda(value) -> bool:
    return isinstance(value, str) and value.startswith("cuda") or getattr(value, "type", None) == "cuda"


def after_hunyuan_modeling(device: str) -> None:
    """Where flash_attn is the import stub, upstream's transformer attends through
    ``masked_attention`` (the smoke's replacement of ``flash_attn_no_pad``)."""
    import sys

    if os.environ.get(IMPORT_STUBS_VARIABLE) != HUNYUAN:
        return  # DanceGRPO's other trainers import the module but never call the kernel
    if getattr(sys.modules.get("flash_attn"), "__file__", None) is not None:
        return  # the real flash-attn is installed: upstream's kernel runs
    from ..stand_ins.video_align import masked_attention

    sys.modules["fastvideo.models.hunyuan_hf.modeling_hunyuan"].flash_attn_no_pad = masked_attention
