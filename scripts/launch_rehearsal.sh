#!/usr/bin/env bash
# The launch rehearsal: each target's upstream script run the way upstream's own launch script starts
# it (torchrun, 2 processes, its arguments, its DataLoader workers), end to end on the CPU with tiny
# models in upstream's on-disk layout, three times (no wrapper; `otca-patch launch`; `otca-patch launch
# --otca`), one PASS/FAIL line per target (python -m otca_patch.rehearsal --help).
#
#   scripts/launch_rehearsal.sh [--device cpu|cuda] [--out DIR] [--keep] [--jobs N] [TARGET ...]
#
# Sets up .venv first (scripts/setup.sh). Upstream checkouts: OTCA_UPSTREAM_DANCEGRPO / _FLOW_GRPO /
# _MIXGRPO, else the pinned snapshots in ../shared/upstream/. Exit status 0 only when every line is PASS.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/setup.sh"
cd "$repo"
exec nice "$repo/.venv/bin/python" -m otca_patch.rehearsal "$@"
