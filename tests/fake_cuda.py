"""A fake multi-GPU node on the CPU: ``torch.cuda`` answers as N devices with a current one, and
every ``.to(cuda...)`` of a tensor or module is recorded (as the device index it resolves to at
that moment, as CUDA would: a bare ``cuda`` is the current device) and otherwise left on the CPU.

Tests use it to prove where weights and inputs would land on each rank, without a GPU.
"""
from __future__ import annotations

import torch


class FakeCuda:
    def __init__(self, monkeypatch, devices: int = 2):
        self.devices, self.current, self.moves = devices, 0, []
        tensor_to, module_to = torch.Tensor.to, torch.nn.Module.to
        fake = self

        def resolve(device) -> int:
            device = torch.device(device)
            index = fake.current if device.index is None else device.index
            if index >= fake.devices:
                raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
            return index

        def split(args, kwargs):
            """(cuda device or None, the call's arguments without it)."""
            device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
            if device is None or device.type != "cuda":
                return None, args, kwargs
            return device, (), {"dtype": dtype} if dtype is not None else {}

        def fake_tensor_to(self_, *args, **kwargs):
            if args and isinstance(args[0], torch.Tensor):
                return tensor_to(self_, *args, **kwargs)
            device, args, kwargs = split(args, kwargs)
            if device is not None:
                fake.moves.append(("tensor", resolve(device)))
                return tensor_to(self_, **kwargs) if kwargs else self_
            return tensor_to(self_, *args, **kwargs)

        def fake_module_to(self_, *args, **kwargs):
            device, args, kwargs = split(args, kwargs)
            if device is not None:
                fake.moves.append(("module", resolve(device)))
                return module_to(self_, **kwargs) if kwargs else self_
            return module_to(self_, *args, **kwargs)

        def set_device(device):
            fake.current = resolve(device if not isinstance(device, int) else torch.device("cuda", device))

        monkeypatch.setattr(torch.Tensor, "to", fake_tensor_to)
        monkeypatch.setattr(torch.nn.Module, "to", fake_module_to)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: fake.devices)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: fake.current)
        monkeypatch.setattr(torch.cuda, "set_device", set_device)

    def indices(self, kind=None) -> set:
        """The device indices recorded (of ``"tensor"`` or ``"module"`` moves only, if given)."""
        return {index for what, index in self.moves if kind in (None, what)}
