#!/usr/bin/env bash
# The README's first command: set up .venv if needed, then run the embedded default —
# OTCA against Multi-GRPO (the fair vanilla) over paired seeds on a tiny FLUX-architecture model, on the CPU.
# Extra arguments go to `otca-patch demo` (see `--help`); the report lands in runs/demo/.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
cd "$repo"
exec "$repo/.venv/bin/otca-patch" demo "$@"
