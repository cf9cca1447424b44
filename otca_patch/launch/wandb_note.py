"""Whether the layer's wandb panels will appear: a launch script, or the environment it starts from,
can keep wandb off wandb.ai. DanceGRPO's ``scripts/finetune/*.sh`` start with
``export WANDB_DISABLED=true`` (then ``WANDB_MODE=online``, which does not undo it: wandb 0.18, their
pin, then writes the run offline under ``./wandb/`` and uploads nothing); MixGRPO's remote command
exports the same. The launch says so once, before training, with how to get the panels."""
from __future__ import annotations

import re

#: ``[export] WANDB_DISABLED=true`` / ``WANDB_MODE=offline`` in a script or a command line's prefix
_ASSIGNMENT = re.compile(r"(?:^|[\s;&|(])(?:export\s+)?(WANDB_DISABLED|WANDB_MODE)=(['\"]?)([^\s'\";&|)]*)\2")
_OFF = {"WANDB_DISABLED": {"true", "1", "yes"}, "WANDB_MODE": {"disabled", "offline", "dryrun"}}


def script_settings(text: str) -> dict[str, str]:
    """The last value the launch's text gives each wandb switch (comments left out)."""
    found = {}
    for line in text.splitlines():
        for match in _ASSIGNMENT.finditer(line.split("#", 1)[0]):
            found[match.group(1)] = match.group(3)
    return found


def wandb_off(text: str, env: dict) -> tuple[str, str, bool] | None:
    """``(variable, value, set by the script)`` of the first setting that keeps wandb off wandb.ai
    (the script's own settings override the environment's), or None when the panels can appear."""
    settings = script_settings(text)
    for variable, off in _OFF.items():
        value = settings.get(variable, env.get(variable))
        if value is not None and value.strip().lower() in off:
            return variable, value, variable in settings
    return None


def panels_note(prog: str, text: str, env: dict, launch_name: str, log_dir: str) -> str | None:
    """The one line the launch prints when the layer's otca/ panels will not reach wandb.ai."""
    off = wandb_off(text, env)
    if off is None:
        return None
    variable, value, in_script = off
    where = f"{launch_name} sets {variable}={value}" if in_script else f"the environment has {variable}={value}"
    how = ("run a copy of the script without that line, or its command after `--`" if in_script
           else f"unset {variable}" if variable == "WANDB_DISABLED" else "set WANDB_MODE=online")
    return (f"{prog}: note: {where}, so wandb uploads nothing and the layer's otca/ panels (otca/reward/<objective>, "
            f"otca/step_weight/...) will not appear on wandb.ai; to get them, {how}; without wandb, "
            f"`otca-patch compare {log_dir}` draws them from the run log (docs/layer.md, Monitoring on wandb)")
