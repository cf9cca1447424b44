"""The tiny FlowGRPO config of a smoke run: upstream's ``config/base.py`` with small sizes.

FlowGRPO takes ``--config FILE:ARG`` (ml_collections); a smoke run writes a one-line FILE that
imports ``get_config`` from here and passes a JSON file as ARG. Upstream's training loop never
ends (``while True``); ``StopAtEpoch`` is the config's ``eval_freq``, and the check
``epoch % config.eval_freq`` at the top of each epoch ends the run (``SystemExit(0)`` on every
process alike) once the requested epochs are done: no upstream code is changed or stubbed for it.
"""
from __future__ import annotations

import importlib.util
import json
import os

#: eval runs at epoch 0 only (upstream evaluates whenever epoch % eval_freq == 0)
_NEVER_AGAIN = 10**9


class StopAtEpoch(int):
    """An ``eval_freq`` that ends the run when ``epoch % eval_freq`` is asked at epoch ``stop``."""

    def __new__(cls, stop: int):
        value = super().__new__(cls, _NEVER_AGAIN)
        value.stop = stop
        return value

    def __rmod__(self, epoch):
        if epoch >= self.stop:
            print(f"config: {self.stop} epochs done (eval_freq); ending the run", flush=True)
            raise SystemExit(0)
        return epoch % _NEVER_AGAIN


def upstream_base_config(upstream_dir: str, named: tuple[str, str] | None = None):
    """Upstream's ``config/base.py``, or with ``named`` = (file, name) one of its named configs
    (``config/grpo.py:general_ocr_sd3_1gpu``, as upstream's launch scripts pass ``--config``)."""
    file, name = named or ("config/base.py", None)
    spec = importlib.util.spec_from_file_location("flowgrpo_base_config", os.path.join(upstream_dir, file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config() if name is None else module.get_config(name)


def get_config(settings_path: str):
    """``settings_path``: JSON with ``upstream_dir``, ``epochs``, dotted ``overrides`` and optionally
    ``named``: [file, name] of the upstream config they apply to (default ``config/base.py``)."""
    with open(settings_path) as handle:
        settings = json.load(handle)
    config = upstream_base_config(settings["upstream_dir"], settings.get("named"))
    for dotted, value in settings["overrides"].items():
        *parents, leaf = dotted.split(".")
        node = config
        for name in parents:
            node = node[name]
        node[leaf] = value
    config.eval_freq = StopAtEpoch(settings["epochs"])
    return config
