"""Start-up hook the launch rehearsal puts on PYTHONPATH (after the checkout's own path, before
nothing of upstream's): in every Python process of a rehearsed launch it installs the stand-ins of
``otca_patch.rehearsal.standins`` as the modules they replace are imported, so upstream's own command
runs unchanged. Standard library only until then; inert without ``$OTCA_REHEARSAL_DEVICE``.

This folder holds this file only. Any other sitecustomize on the path still runs.
"""
import os
import sys

DEVICE_VARIABLE = "OTCA_REHEARSAL_DEVICE"
HERE = os.path.dirname(os.path.abspath(__file__))


class _AfterImport:
    """A meta-path finder that runs a callback once a named module has been executed."""

    def __init__(self, callbacks):
        self.callbacks = dict(callbacks)

    def find_spec(self, name, path=None, target=None):
        if name not in self.callbacks:
            return None
        sys.meta_path.remove(self)
        try:
            from importlib.util import find_spec

            spec = find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        callback, loader = self.callbacks.pop(name), spec.loader
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            callback(module)

        loader.exec_module = exec_module
        return spec


def _install(hook_name):
    def callback(_module):
        from otca_patch.rehearsal import standins

        getattr(standins, hook_name)(os.environ[DEVICE_VARIABLE])

    return callback


def _chain_next_sitecustomize():
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    module = sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if module is not None:
            sys.modules["sitecustomize"] = module


if os.environ.get(DEVICE_VARIABLE):
    sys.meta_path.insert(0, _AfterImport({"torch": _install("after_torch"),
                                          "hpsv2.src.open_clip": _install("after_hpsv2_open_clip"),
                                          "HPSv2.hpsv2.src.open_clip": _install("after_hpsv2_open_clip"),
                                          "fastvideo.models.hunyuan_hf.modeling_hunyuan":
                                              _install("after_hunyuan_modeling")}))
_chain_next_sitecustomize()
