#!/usr/bin/env bash
# Creates .venv in the repo root when it is missing and (re)installs the package when pyproject.toml
# changed since the last install; otherwise reuses it. Sourced by demo.sh and test.sh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
python="${OTCA_PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
stamp="$venv/.otca-installed"
want="$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv with $("$python" --version 2>&1)" >&2
  "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing otca-patch and its pinned dependencies into .venv (first run: several minutes)" >&2
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$repo[dev,upstream]"
  echo "$want" > "$stamp"
fi
