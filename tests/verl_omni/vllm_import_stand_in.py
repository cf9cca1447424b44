"""An import-only stand-in for vLLM and vLLM-Omni, loaded as a pytest plugin (``-p vllm_import_stand_in``).

Why it exists: VeRL-Omni's package ``__init__`` imports its rollout pipelines, which import ``vllm`` and
``vllm_omni`` at module level. vLLM is a CUDA serving engine with no CPU build on the package index, and
vllm-omni does not pull it in, so on this CPU machine nothing of either can run. The stand-in lets those
modules import; it never runs anything: every attribute of a stood-in module is a new empty class (and so are its attributes), so any
code that calls into vLLM fails there (VeRL-Omni's rollout and vLLM tests, which need the real engine).
What the credit plug-in and its tests use (the trainer, the estimator registry, the reward manager,
``DataProto``) never touches it.

As with the real vLLM, VeRL-Omni's ``__init__`` then writes its fused-MoE compatibility module and ``.pth``
file into the environment's site-packages (they alias one vLLM name at import; nothing else).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types

STOOD_IN = ("vllm", "vllm_omni")
#: the distributions' versions (verl reads vLLM's at import to pick its code path): VeRL-Omni's pins
VERSIONS = {"vllm": "0.27.0", "vllm-omni": "0.27.0rc1"}


def _stand_in(owner: str, name: str) -> type:
    return _StandInType(name, (), {"__module__": owner, "__doc__": "vLLM import stand-in: not runnable"})


class _StandInType(type):
    """A stood-in name: a class whose every attribute is another stood-in name (``module.function`` too)."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(f"{cls.__module__}.{cls.__name__}", name)
        setattr(cls, name, value)
        return value


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(self.__name__, name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in STOOD_IN:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        wanted = (context.name or "").replace("_", "-").lower()
        return [_Metadata(name) for name in VERSIONS if not context.name or name == wanted]


class _Metadata(importlib.metadata.Distribution):
    """Name and version only: enough for ``importlib.metadata.version``."""

    def __init__(self, name: str):
        self._name = name

    def read_text(self, filename):
        return f"Metadata-Version: 2.1\nName: {self._name}\nVersion: {VERSIONS[self._name]}\n" \
            if filename == "METADATA" else None

    def locate_file(self, path):
        return None


def install() -> None:
    """Stand in for vLLM / vLLM-Omni unless the real ones are importable."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    if all(importlib.machinery.PathFinder.find_spec(name) is None for name in STOOD_IN):
        sys.meta_path.insert(0, _Finder())


install()
