#!/usr/bin/env bash
# What only a GPU shows: every smoke target (`otca-patch smoke --help`) runs upstream's real training
# step with --otca on CUDA: tiny models, upstream's own bf16 autocast / mixed precision, an NCCL
# world of 1 process, and of 2 where two GPUs exist. Per run it checks the run log against the
# credit engine (scripts/check_run_log_credit.py) and prints one line: PASS/FAIL, then the layer's
# time and peak memory per step as ratios to the step (otca_patch/smoke/meter.py).
#
#   scripts/gpu_check.sh [TARGET ...]          # default: every smoke target
#
# Budget: 8 minutes on one GPU (each run is capped by OTCA_GPU_CHECK_RUN_S, default 100 s; runs that
# would start after OTCA_GPU_CHECK_BUDGET_S, default 450 s, are reported SKIP). Without CUDA it
# refuses and exits 2. Upstream checkouts: $OTCA_UPSTREAM_DANCEGRPO / $OTCA_UPSTREAM_FLOW_GRPO, the
# populated submodules, or the pinned snapshots in ../shared/upstream/ (unpacked to a temporary folder).
# Exit status: 0 when every run passed, 1 otherwise.
set -uo pipefail
main() {
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$here/scripts/_python.sh"
say() { echo "gpu_check: $*"; }

export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's package, wherever a command runs

# OTCA_GPU_CHECK_DEVICE=cpu: the same runs and checks on the CPU (gloo, world 1): a test of this script
device="${OTCA_GPU_CHECK_DEVICE:-cuda}"
if [ "$device" = cpu ]; then
  gpus=1
else
  gpus="$("$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null)"
  if [ -z "$gpus" ] || [ "$gpus" = 0 ]; then
    say "no CUDA device here (torch.cuda.is_available() is False): this check needs a GPU; nothing was run"
    exit 2
  fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/otca-gpu-check-XXXXXX")"
checkout() {  # NAME VARIABLE MARKER -> the checkout's path
  local name="$1" variable="$2" marker="$3" path spec commit snapshot
  path="${!variable:-}"
  [ -z "$path" ] && [ -f "$here/upstream/$name/$marker" ] && path="$here/upstream/$name"
  if [ -z "$path" ]; then
    spec="$(grep -l "^upstream = \"$name\"" "$here"/otca_patch/patches/*/*.toml | head -1)"
    commit="$(sed -n 's/^verified_commit = "\(.......\).*/\1/p' "$spec")"
    snapshot="${OTCA_SHARED:-$here/../shared}/upstream/$name-$commit.tar.gz"
    [ -f "$snapshot" ] && tar xzf "$snapshot" -C "$work" && path="$work/$name"
  fi
  [ -n "$path" ] && [ -f "$path/$marker" ] && echo "$path"
}
dancegrpo="$(checkout DanceGRPO OTCA_UPSTREAM_DANCEGRPO fastvideo/train_grpo_flux.py)"
flow_grpo="$(checkout flow_grpo OTCA_UPSTREAM_FLOW_GRPO scripts/train_sd3.py)"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd "$here" && "$python" -c 'from otca_patch.smoke.cli import smoke_targets; print("\n".join(smoke_targets()))')
fi
worlds=(1)
[ "$device" = cuda ] && [ "$gpus" -ge 2 ] && worlds+=(2)
budget="${OTCA_GPU_CHECK_BUDGET_S:-450}"
run_limit="${OTCA_GPU_CHECK_RUN_S:-100}"
started=$(date +%s)
say "$device, $gpus device(s): $("$python" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU", "| torch", torch.__version__)'); worlds ${worlds[*]}; runs in $work"
failed=0
port=$((29500 + RANDOM % 400))
for target in "${targets[@]}"; do
  case "$target" in flowgrpo-*) upstream="$flow_grpo" ;; *) upstream="$dancegrpo" ;; esac
  for world in "${worlds[@]}"; do
    label="$(printf '%-26s world %s' "$target" "$world")"
    if [ -z "$upstream" ]; then
      echo "FAIL $label: no upstream checkout for it (set OTCA_UPSTREAM_DANCEGRPO / OTCA_UPSTREAM_FLOW_GRPO)"
      failed=1; continue
    fi
    if [ $(( $(date +%s) - started )) -ge "$budget" ]; then
      echo "SKIP $label: the ${budget} s budget is spent"; failed=1; continue
    fi
    out="$work/$target-world$world"
    port=$((port + 1))
    t0=$(date +%s)
    (cd "$here" && OTCA_SMOKE_DEVICE="$device" OTCA_SMOKE_METER=1 timeout "$run_limit" \
      "$python" -m torch.distributed.run --nproc_per_node "$world" --master_port "$port" \
      -m otca_patch.smoke "$upstream" "$out" --target "$target" --otca) > "$out.log" 2>&1
    status=$?
    seconds=$(( $(date +%s) - t0 ))
    if [ $status -ne 0 ]; then
      why="$(grep -E 'Error|error|smoke:' "$out.log" | tail -1 | cut -c1-220)"
      [ $status -eq 124 ] && why="over the ${run_limit} s limit"
      echo "FAIL $label (${seconds} s): exit $status: ${why:-see $out.log}"
      failed=1; continue
    fi
    if ! "$python" "$here/scripts/check_run_log_credit.py" "$out" --processes "$world" > "$out.credit" 2>&1; then
      echo "FAIL $label (${seconds} s): the run log differs from the credit engine: $(tail -1 "$out.credit" | cut -c1-200)"
      failed=1; continue
    fi
    echo "PASS $label (${seconds} s): credit matches the engine; $("$python" -m otca_patch.smoke.meter "$out")"
  done
done
say "done in $(( $(date +%s) - started )) s; logs in $work"
return $failed
}
main "$@"
