#!/usr/bin/env bash
# Creates .venv in the repo root when it is missing and (re)installs the package when pyproject.toml
# changed since the last install; otherwise reuses it. Sourced by demo.sh and test.sh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
python="${OTCA_PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
stamp="$venv/.otca-installed"
want="$(cat "$repo/pyproject.toml" "$repo/envs/dev.txt" | sha256sum | cut -d" " -f1)"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv "$venv"
fi
log="$venv/setup.log"
# shellcheck source=scripts/quietly.sh
. "$repo/scripts/quietly.sh"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing otca-patch and its pinned dependencies into .venv (first run: about 5.5 minutes on 2 cores; output in $log)" >&2
  : > "$log"
  # setuptools 77 or later reads pyproject.toml's SPDX license string (the tests build the wheel without isolation)
  quietly "$log" "$venv/bin/python" -m pip install --upgrade pip "setuptools>=77"
  quietly "$log" "$venv/bin/python" -m pip install -e "$repo[dev,rewards,demo,upstream,flowgrpo]" -c "$repo/envs/dev.txt"
  # ImageReward pins timm==0.6.13 against open_clip's timm>=1.0.17; its adapter loads the model
  # files itself and needs only the package's model code, so it goes in without its pins.
  quietly "$log" "$venv/bin/python" -m pip install --no-deps image-reward==1.5 fairscale==0.4.13
  echo "$want" > "$stamp"
  echo "setup: done" >&2
fi
# Qwen-Image's text encoder is Qwen2.5-VL (transformers >= 4.49); .venv keeps DanceGRPO's 4.46.1, so
# FlowGRPO's Qwen-Image smoke processes import a newer one from .venv/qwen-transformers first
# (otca_patch/stand_ins/qwen_transformers.py installs it there and finds it; docs/flowgrpo-trainers.md).
if [ ! -d "$venv/qwen-transformers/transformers/models/qwen2_5_vl" ]; then
  quietly "$log" "$venv/bin/python" -m otca_patch.stand_ins.qwen_transformers
fi
