#!/usr/bin/env bash
# A/B run: the vanilla side (observed: trains as vanilla, logs every objective) and the OTCA side of
# one launch, same seeds and initial noise, each in its own run folder; then `otca-patch compare`.
#   cd upstream/DanceGRPO
#   ../../scripts/ab_compare.sh --out ../../ab_runs/flux scripts/finetune/finetune_flux_grpo.sh --otca_rewards upstream,clip_t
#   scripts/ab_compare.sh --out /tmp/ab --smoke upstream/DanceGRPO --steps 4 --otca_mode otca   # CPU smoke
# See `scripts/ab_compare.sh --help`. OTCA_PYTHON picks the interpreter, as for otca_run.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/scripts/_python.sh"
exec "$python" -m otca_patch.ab.cli "$@"
