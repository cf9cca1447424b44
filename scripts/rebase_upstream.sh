#!/usr/bin/env bash
# Try an upstream submodule on another commit: fetch REF from a local clone, check the hook points
# (otca-patch doctor), run the smoke script, and pin the new commit only when everything holds.
#   scripts/rebase_upstream.sh v1.1 ~/src/DanceGRPO          # moves upstream/DanceGRPO
#   scripts/rebase_upstream.sh --smoke skip abc1234 ~/src/flow_grpo
# See `scripts/rebase_upstream.sh --help`. OTCA_PYTHON picks the interpreter, as for otca_run.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/scripts/_python.sh"
exec "$python" -m otca_patch.tools.rebase "$@"
