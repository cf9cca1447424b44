#!/usr/bin/env bash
# Try an upstream submodule on another commit: fetch REF from a local clone, check the hook points
# (otca-patch doctor), run the smoke script, and pin the new commit only when everything holds.
#   scripts/rebase_upstream.sh v1.1 ~/src/DanceGRPO          # moves upstream/DanceGRPO
#   scripts/rebase_upstream.sh --smoke skip abc1234 ~/src/flow_grpo
# See `scripts/rebase_upstream.sh --help`. OTCA_PYTHON picks the interpreter, as for otca_run.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${OTCA_PYTHON:-}"
if [ -z "$python" ]; then
  if command -v python >/dev/null 2>&1 && (cd / && python -c "import otca_patch") 2>/dev/null; then
    python=python
  else
    python="$here/.venv/bin/python"
  fi
fi
exec "$python" -m otca_patch.hooks.rebase "$@"
