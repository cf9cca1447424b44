"""The ``--config`` of a FlowGRPO rehearsal run: upstream's named config (``config/grpo.py:NAME``, as
upstream's launch scripts pass it) with the small sizes of ``settings`` (``smoke.flowgrpo_config``),
and the CPU stand-ins ``settings["stand_ins"]`` names; each ``wandb.log`` call's numbers are copied to the run's
folder (``logged_numbers``).

absl parses ``--config`` in every process inside ``app.run(main)``, after the trainer's module body
has run and before ``main`` starts: the one moment a stand-in can reach the trainer's globals
(``sys.modules["__main__"]``, with or without the layer) without a wrapper around upstream's script.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..smoke import flowgrpo_config
from .logged_numbers import FILE_NAME, copy_logged_numbers


def _accelerate_on_cpu() -> None:
    from ..stand_ins.cpu import accelerate_as_on_gpus

    accelerate_as_on_gpus()


def _fsdp_on_cpu() -> None:
    from ..stand_ins.flowgrpo import cpu_fsdp

    cpu_fsdp(sys.modules["__main__"])


def _float_ids_as_transformers_4() -> None:
    from ..stand_ins.cpu import decode_float_ids_as_transformers_4

    decode_float_ids_as_transformers_4()


#: name in the settings -> the stand-in it installs in this process
STAND_INS = {"accelerate_on_cpu": _accelerate_on_cpu, "fsdp_on_cpu": _fsdp_on_cpu,
             "float_ids_as_transformers_4": _float_ids_as_transformers_4}


def get_config(settings_path: str):
    with open(settings_path) as handle:
        stand_ins = json.load(handle).get("stand_ins", [])
    for name in stand_ins:
        STAND_INS[name]()
    # what the checks read: the numbers upstream logs, copied beside the settings (the run's folder)
    copy_logged_numbers(Path(settings_path).parent / FILE_NAME)
    return flowgrpo_config.get_config(settings_path)
