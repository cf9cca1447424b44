"""A fake multi-GPU node on the CPU: ``torch.cuda`` answers as N devices with a current one, and
every ``.to(cuda...)`` / ``.cuda()`` of a tensor or module is recorded (as the device index it
resolves to at that moment, as CUDA would: a bare ``cuda`` is the current device) and otherwise left
on the CPU.

While it is active, tensors that would be on a GPU carry their device index (``.device`` answers
``cuda:N``; what is computed from them carries it too), and CUDA's rules are enforced:
- a CUDA tensor meeting a CPU one (other than a 0-dim CPU scalar, which CUDA accepts) in one
  operation, or tensors of two GPUs, raises ``RuntimeError`` ("Expected all tensors to be on the same
  device"), as CUDA would;
- a tensor factory (``torch.zeros``, ``torch.tensor``, ...) called without ``device=`` makes a CPU tensor,
  and is recorded in ``factories`` (name and caller) so a test can say none was made where a GPU
  tensor belonged; with ``device="cuda..."`` it makes a (fake) CUDA tensor;
- a host read of a CUDA tensor (``.item()``, ``.tolist()``, ``float()``, ``bool()``, ``.cpu()``, a
  ``.to("cpu")``) is a device synchronisation: each is recorded in ``syncs``.
Gradients that autograd makes are not tracked (they count as CPU tensors).

Tests use it to prove where weights and inputs would land on each rank, without a GPU.
"""
from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_TAG = "_fake_cuda_index"
#: factories that take ``device=``; a ``*_like`` / ``new_*`` follows its input's device instead
FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.rand, torch.randn, torch.randint,
             torch.randperm, torch.arange, torch.linspace, torch.tensor, torch.as_tensor, torch.eye}
#: operations that may mix devices under CUDA too (copies, indexing with CPU indices, moves)
MIXING_ALLOWED = {"to", "copy_", "cuda", "cpu", "__getitem__", "__setitem__", "index_put", "index_put_",
                  "__repr__", "__format__", "__str__", "__reduce_ex__", "__deepcopy__", "__get__", "__set__"}
#: host reads of a tensor's values
SYNCS = {"item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy"}


def cuda_index(tensor):
    """The fake GPU a tensor is on, or None (on the CPU)."""
    return getattr(tensor, _TAG, None) if isinstance(tensor, torch.Tensor) else None


def _name(func) -> str:
    return getattr(func, "__name__", "") or getattr(getattr(func, "__self__", None), "__name__", "")


_TORCH_DIR = __import__("os").path.dirname(torch.__file__)


def _caller() -> str:
    """``file:line`` of the code that made the call (the first frame outside this file and torch)."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code.co_filename.startswith(_TORCH_DIR)):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


class _Mode(TorchFunctionMode):
    def __init__(self, fake):
        super().__init__()
        self.fake = fake

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fake, name = self.fake, _name(func)
        owner = getattr(func, "__self__", None)  # a property's getter: __get__ of Tensor.device / .is_cuda
        if owner is torch.Tensor.device and cuda_index(args[0]) is not None:
            return torch.device("cuda", cuda_index(args[0]))
        if owner is torch.Tensor.is_cuda and cuda_index(args[0]) is not None:
            return True
        if func in FACTORIES:
            device = kwargs.get("device")
            if device is None:
                fake.factories.append((name, _caller()))
                return func(*args, **kwargs)
            device = torch.device(device)
            if device.type != "cuda":
                return func(*args, **kwargs)
            index = fake.resolve(device)
            out = func(*args, **{**kwargs, "device": "cpu"})
            return fake.tag(out, index)
        if (name.endswith("_like") or name.startswith("new_")) and kwargs.get("device") is not None \
                and torch.device(kwargs["device"]).type == "cuda":  # an explicit GPU
            index = fake.resolve(kwargs["device"])
            return fake.tag(func(*args, **{**kwargs, "device": "cpu"}), index)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        gpus = {cuda_index(t) for t in tensors} - {None}
        if name in SYNCS and gpus:
            fake.syncs.append((name, _caller()))
        if name not in MIXING_ALLOWED and gpus:
            cpu = [t for t in tensors if cuda_index(t) is None and t.dim() > 0]
            if len(gpus) > 1 or cpu:
                found = sorted(f"cuda:{i}" for i in gpus) + (["cpu"] if cpu else [])
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two "
                                   f"devices, {' and '.join(found)}! (FakeCuda, in {name or func})")
        out = func(*args, **kwargs)
        if gpus and name not in SYNCS and name != "cpu":
            (index,) = gpus if len(gpus) == 1 else (min(gpus),)
            out = tree_map(lambda value: fake.tag(value, index) if isinstance(value, torch.Tensor) else value, out)
        return out


class FakeCuda:
    def __init__(self, monkeypatch, devices: int = 2):
        self.devices, self.current, self.moves = devices, 0, []
        self.factories, self.syncs = [], []
        tensor_to, module_to = torch.Tensor.to, torch.nn.Module.to
        fake = self

        def split(args, kwargs):
            """(target device or None, the call's arguments without it)."""
            device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
            if device is None:
                return None, args, kwargs
            return device, (), {"dtype": dtype} if dtype is not None else {}

        def fake_tensor_to(self_, *args, **kwargs):
            if args and isinstance(args[0], torch.Tensor):  # .to(other): other's device
                other = cuda_index(args[0])
                if other is None:
                    return fake.untag(fake.alias(tensor_to(self_, *args, **kwargs), self_))
                fake.moves.append(("tensor", other))
                return fake.tag(fake.alias(tensor_to(self_, dtype=args[0].dtype), self_), other)
            device, rest, kw = split(args, kwargs)
            if device is not None and device.type == "cuda":
                index = fake.resolve(device)
                fake.moves.append(("tensor", index))
                return fake.tag(fake.alias(tensor_to(self_, **kw) if kw else self_, self_), index)
            if device is not None and cuda_index(self_) is not None:  # to the CPU: a host copy
                fake.syncs.append(("to(cpu)", _caller()))
                return fake.untag(fake.alias(tensor_to(self_, **kw) if kw else self_, self_))
            return tensor_to(self_, *args, **kwargs)

        def fake_module_to(self_, *args, **kwargs):
            device, rest, kw = split(args, kwargs)
            if device is not None and device.type == "cuda":
                index = fake.resolve(device)
                fake.moves.append(("module", index))
                moved = module_to(self_, **kw) if kw else self_
                for tensor in list(moved.parameters()) + list(moved.buffers()):
                    fake.tag(tensor, index)
                return moved
            if device is not None:
                for tensor in list(self_.parameters()) + list(self_.buffers()):
                    fake.untag(tensor)
                return module_to(self_, **kw) if kw else self_
            return module_to(self_, *args, **kwargs)

        def fake_tensor_cuda(self_, device=None, non_blocking=False, **_):
            return fake_tensor_to(self_, torch.device("cuda") if device is None else
                                  torch.device("cuda", device) if isinstance(device, int) else device)

        def fake_tensor_cpu(self_, *_, **__):
            if cuda_index(self_) is None:
                return self_
            fake.syncs.append(("cpu", _caller()))
            return fake.untag(fake.alias(self_, self_))

        def fake_module_cuda(self_, device=None):
            return fake_module_to(self_, torch.device("cuda") if device is None else
                                  torch.device("cuda", device) if isinstance(device, int) else device)

        def set_device(device):
            fake.current = fake.resolve(device if not isinstance(device, int) else torch.device("cuda", device))

        monkeypatch.setattr(torch.Tensor, "to", fake_tensor_to)
        monkeypatch.setattr(torch.Tensor, "cuda", fake_tensor_cuda)
        monkeypatch.setattr(torch.Tensor, "cpu", fake_tensor_cpu)
        monkeypatch.setattr(torch.nn.Module, "to", fake_module_to)
        monkeypatch.setattr(torch.nn.Module, "cuda", fake_module_cuda)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: fake.devices)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: fake.current)
        monkeypatch.setattr(torch.cuda, "set_device", set_device)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: fake.syncs.append(("synchronize", _caller())))
        self._mode = _Mode(self)
        self._mode.__enter__()
        self._closer = _Closer(self._mode)
        monkeypatch.setattr(self._closer, "active", True)  # monkeypatch's undo sets it back: the mode ends

    def resolve(self, device) -> int:
        device = torch.device(device)
        index = self.current if device.index is None else device.index
        if index >= self.devices:
            raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
        return index

    @staticmethod
    def tag(tensor, index: int):
        if isinstance(tensor, torch.Tensor):
            setattr(tensor, _TAG, index)
        return tensor

    @staticmethod
    def untag(tensor):
        if isinstance(tensor, torch.Tensor) and hasattr(tensor, _TAG):
            delattr(tensor, _TAG)
        return tensor

    @staticmethod
    def alias(result, source):
        """A new tensor object for a move that CUDA would copy (the source keeps its own device)."""
        if result is source:
            with torch._C.DisableTorchFunction():
                result = source.view_as(source) if source.requires_grad else source.detach()
        return result

    def indices(self, kind=None) -> set:
        """The device indices recorded (of ``"tensor"`` or ``"module"`` moves only, if given)."""
        return {index for what, index in self.moves if kind in (None, what)}

    def stop(self) -> None:
        """Leave the fake's mode now (else the test's monkeypatch undo does)."""
        self._closer.active = False


class _Closer:
    """``active = False`` (monkeypatch's undo, or ``stop``) leaves the mode, once."""

    def __init__(self, mode):
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "active", False)

    def __setattr__(self, name, value):
        if name == "active" and not value and self.active:
            self.mode.__exit__(None, None, None)
        object.__setattr__(self, name, value)
