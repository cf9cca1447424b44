#!/usr/bin/env bash
# Alias of `otca-patch launch` (the console command of an installed otca-patch), for this checkout.
# Run an upstream launch script unchanged, with otca-patch installed in every trainer process:
#   cd upstream/DanceGRPO
#   ../../scripts/otca_run.sh scripts/finetune/finetune_flux_grpo.sh --otca --otca_rewards upstream,clip_t ...
# or a launch command line, unchanged, after --:
#   cd upstream/flow_grpo
#   ../../scripts/otca_run.sh --otca --otca_rewards pickscore,ocr -- accelerate launch --config_file \
#     scripts/accelerate_configs/multi_gpu.yaml scripts/train_sd3.py --config config/grpo.py:general_ocr_sd3
# Without --otca (or --otca_observe) the upstream script runs exactly as published.
# The Python that torchrun/accelerate use must have otca-patch installed (pip install <this repo>);
# OTCA_PYTHON picks the interpreter (default: python on PATH, else this repo's .venv).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/scripts/_python.sh"
if ! (cd / && "$python" -c "import otca_patch") 2>/dev/null; then
  echo "otca_run.sh: $python cannot import otca_patch; install it into the training environment: pip install $here" >&2
  exit 2
fi
exec "$python" -m otca_patch.launch.wrapper "$@"
