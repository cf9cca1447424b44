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
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing otca-patch and its pinned dependencies into .venv (first run: several minutes)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$repo[dev,rewards,demo,upstream,flowgrpo]" -c "$repo/envs/dev.txt"
  # ImageReward pins timm==0.6.13 against open_clip's timm>=1.0.17; its adapter loads the model
  # files itself and needs only the package's model code, so it goes in without its pins.
  "$venv/bin/python" -m pip install --quiet --no-deps image-reward==1.5 fairscale==0.4.13
  echo "$want" > "$stamp"
fi
# Qwen-Image's text encoder is Qwen2.5-VL (transformers >= 4.49); .venv keeps DanceGRPO's 4.46.1, so
# FlowGRPO's Qwen-Image smoke processes import a newer one from this folder first (docs/flowgrpo-trainers.md).
qwen="$venv/qwen-transformers"
if [ ! -d "$qwen/transformers/models/qwen2_5_vl" ]; then
  "$venv/bin/python" -m pip install --quiet --no-deps --target "$qwen" transformers==4.51.3 "tokenizers>=0.21,<0.22"
fi
