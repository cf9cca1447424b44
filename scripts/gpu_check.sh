#!/usr/bin/env bash
# What only a GPU shows, in one call of the GPU machine (docs/gpu-check.md gives the call): every smoke
# target (`otca-patch smoke --help`) runs upstream's real training step with --otca on CUDA
# (cuda:{LOCAL_RANK}, NCCL, upstream's own bf16 autocast / mixed precision; tiny models), a world of 1
# process, and of 2 where two GPUs exist. Each run's log is checked against the credit engine recomputed
# from the logged rewards and latents' progress (scripts/check_run_log_credit.py); one line per run:
# PASS, or FAIL and its cause. Then scripts/bench_gpu.py and scripts/bench_memory.py, one line each.
#
#   scripts/gpu_check.sh [TARGET ...]              # on the GPU machine; default: every smoke target
#   scripts/gpu_check.sh --rehearse [TARGET ...]   # here, on the CPU: the same runs in a stand-in for the
#                                                  # GPU machine's python (scripts/gpu_rehearse_env.sh)
#
# Everything comes from the repository and its git-ignored .gpu-payload/ (scripts/gpu_payload.sh): the
# carried wheels are installed into a temporary folder first on PYTHONPATH, the upstream snapshots are
# unpacked from .gpu-payload/upstream/ (OTCA_UPSTREAM_DANCEGRPO / _FLOW_GRPO / _MIXGRPO override them on a
# GPU, never in a rehearsal). --rehearse builds the payload and the environment if needed, forces the
# CPU (gloo stands in for NCCL) and prints the payload's size and its own wall time.
#
# Then the launch rehearsal (python -m otca_patch.rehearsal --device cuda, or cpu in --rehearse): each
# rehearsed target's upstream launch script run as it is, its set-up lines served locally, end to end,
# one PASS/FAIL line each with its script=PATH setup=N (on a GPU by default one
# target per upstream, OTCA_GPU_CHECK_LAUNCH_TARGETS for others; on the CPU stand-in the targets whose FSDP
# run fails on its torch are NOT RUN), at most OTCA_GPU_CHECK_LAUNCH_S (default 240 s on a GPU, 1500 s
# here) in all; 0 leaves it out.
# Runs go OTCA_GPU_CHECK_JOBS at a time (default 6 on a GPU, 2 here), each capped at OTCA_GPU_CHECK_RUN_S
# (default 120 s on a GPU, 400 s here); the benches at 150 s and 100 s: at most about 9 minutes on a GPU.
# OTCA_GPU_CHECK_KEEP=DIR: every log and figure also lands in DIR/gpu_check_logs.tar.gz.
# The interpreter: OTCA_PYTHON, else python3 (the GPU machine's).
# Exit status: 0 every line PASS; 1 a FAIL; 2 no CUDA device (nothing run); 3 the interpreter or torch
# does not run; 4 the payload is missing or cannot be installed, or otca_patch does not import.
set -uo pipefail
main() {
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "gpu_check: $*"; }
started=$(date +%s)
rehearse=0
if [ "${1:-}" = --rehearse ]; then rehearse=1; shift; fi
payload="$here/.gpu-payload"
work="$(mktemp -d "${TMPDIR:-/tmp}/otca-gpu-check-XXXXXX")"
trap 'rm -rf "$work/site" "$work/upstream"' EXIT  # the logs stay; the installed wheels and checkouts go

# ---- the interpreter: the GPU machine's python3, or in a rehearsal the environment standing in for it
if [ "$rehearse" = 1 ]; then
  payload_size="$("$here/scripts/gpu_payload.sh")" || { say "FAILED: the payload could not be built"; return 4; }
  python="$("$here/scripts/gpu_rehearse_env.sh")" || { say "FAILED: the rehearsal environment could not be built"; return 3; }
  device=cpu
else
  python="${OTCA_PYTHON:-python3}"
  device=cuda
fi
if ! version="$("$python" -c 'import sys; print(sys.version.split()[0])' 2>&1)"; then
  say "the interpreter '$python' does not run (${version:0:300}); nothing was run"; return 3
fi
if ! torch_version="$("$python" -c 'import torch; print(torch.__version__)' 2>&1)"; then
  if grep -q "No module named 'torch'" <<<"$torch_version"; then
    say "torch is not installed for $python (Python $version); nothing was run"
  else
    say "torch does not import under $python (Python $version): $(tail -1 <<<"$torch_version" | cut -c1-300); nothing was run"
  fi
  return 3
fi
if [ "$device" = cuda ]; then
  if ! gpus="$("$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>&1)"; then
    say "torch $torch_version imports, but asking it for CUDA devices failed: $(tail -1 <<<"$gpus" | cut -c1-300)"; return 3
  fi
  gpus="$(tail -1 <<<"$gpus")"
  if [ "$gpus" = 0 ]; then
    say "no CUDA device here (torch $torch_version: torch.cuda.is_available() is False): this check needs a GPU;" \
        "nothing was run (scripts/gpu_check.sh --rehearse runs it on the CPU)"
    return 2
  fi
else
  gpus=0
fi

# ---- the carried wheels, first on the path; this checkout's package
if ! ls "$payload"/wheels/*.whl >/dev/null 2>&1; then
  say "no wheels in $payload/wheels: build the payload with scripts/gpu_payload.sh here and carry .gpu-payload"; return 4
fi
if ! "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" \
    "$payload"/wheels/*.whl > "$work/pip.log" 2>&1; then
  say "installing the carried wheels failed: $(grep -v '^WARNING' "$work/pip.log" | tail -1 | cut -c1-300)"; return 4
fi
export PYTHONPATH="$work/site:$here" PYTHONNOUSERSITE=1 WANDB_MODE=disabled
[ "$rehearse" = 1 ] && export OMP_NUM_THREADS=1
# each package the runs import: there, missing (no such module), or there but failing to import
"$python" - > "$work/packages.txt" 2> "$work/packages.err" <<'PY'
import importlib, importlib.metadata as md, importlib.util
MODULES = {"torch": "torch", "transformers": "transformers", "accelerate": "accelerate", "diffusers": "diffusers",
           "peft": "peft", "einops": "einops", "safetensors": "safetensors", "wandb": "wandb", "cv2": "opencv-python",
           "decord": "decord", "liger_kernel": "liger_kernel", "ml_collections": "ml_collections", "hpsv2": "hpsv2",
           "open_clip": "open_clip_torch", "otca_patch": None}
for module, dist in MODULES.items():
    if importlib.util.find_spec(module) is None:
        print(f"missing {module}: no such module on this machine or in the payload"); continue
    try:
        importlib.import_module(module)
    except Exception as exc:
        print(f"broken {module}: installed, but its import fails: {type(exc).__name__}: {str(exc)[:240]}"); continue
    try:
        version = md.version(dist) if dist else "this checkout"
    except md.PackageNotFoundError:
        version = getattr(importlib.import_module(module), "__version__", "?")
    print(f"ok {module} {version}")
PY
if grep -q "^\(missing\|broken\) otca_patch" "$work/packages.txt"; then
  say "otca_patch itself: $(grep otca_patch "$work/packages.txt")"; return 4
fi
grep -v '^ok' "$work/packages.txt" | sed 's/^/gpu_check: package /'
say "$( [ "$rehearse" = 1 ] && echo "REHEARSAL on the CPU (gloo for NCCL)" || echo "$gpus CUDA device(s)" ):" \
    "$("$python" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU")' 2>/dev/null)," \
    "Python $version; $(sed -n 's/^ok \([^ ]*\) \(.*\)/\1 \2/p' "$work/packages.txt" | grep -v otca_patch | paste -sd, | sed 's/,/, /g')"

# ---- the upstream checkouts: the carried snapshots (a variable may name a checkout, on a GPU only)
checkout() {  # NAME -> the checkout's path, or nothing
  local name="$1" variable snapshot
  variable="OTCA_UPSTREAM_$(tr a-z A-Z <<<"$name" | tr -d _)"
  [ "$name" = flow_grpo ] && variable=OTCA_UPSTREAM_FLOW_GRPO
  if [ "$rehearse" = 0 ] && [ -n "${!variable:-}" ]; then echo "${!variable}"; return; fi
  snapshot="$(ls "$payload/upstream/$name-"*.tar.gz 2>/dev/null | head -1)"
  [ -n "$snapshot" ] && mkdir -p "$work/upstream" && tar xzf "$snapshot" -C "$work/upstream" && echo "$work/upstream/$name"
}
declare -A upstreams
for name in DanceGRPO flow_grpo MixGRPO; do upstreams[$name]="$(checkout "$name")"; done

# ---- the runs: TARGET UPSTREAM, from the descriptors (each target's spec names its upstream)
if ! "$python" -c '
import sys
from otca_patch.smoke.cli import smoke_targets
targets = smoke_targets()
for name in sys.argv[1:] or targets:
    if name not in targets:
        raise SystemExit(name + ": not a smoke target (they are: " + ", ".join(targets) + ")")
    smoke = targets[name][1]
    # the fewest processes the upstream main runs on (FlowGRPO FLUX loops read the DDP transformer.module)
    least = smoke.processes
    # accelerate wraps the model in DDP only under its own launcher on the CPU: as upstream launches
    launcher = "accelerate" if least > 1 and smoke.launcher == "accelerate" else "torchrun"
    print(name, targets[name][0].upstream, least, launcher)' "$@" > "$work/targets.txt" 2> "$work/targets.err"; then
  say "$(tail -1 "$work/targets.err")"; return 1
fi
worlds=(1)
[ "$gpus" -ge 2 ] && worlds+=(2)
jobs="${OTCA_GPU_CHECK_JOBS:-$( [ "$rehearse" = 1 ] && echo 2 || echo 6)}"
run_limit="${OTCA_GPU_CHECK_RUN_S:-$( [ "$rehearse" = 1 ] && echo 400 || echo 120)}"
cause() {  # LOG -> the failing run's last error (a rank's, not torchrun's report of it) and where it was raised
  local log="$1" error where
  error="$(sed 's/^\[rank[0-9]*\]: //' "$log" | grep -E '^([A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Exit)|otca-patch[a-z ]*: error|smoke: )' \
           | grep -v -e 'ChildFailedError' -e '^smoke: failed' | tail -1)"  # the error, not the smoke's closing line
  where="$(sed 's/^\[rank[0-9]*\]: //' "$log" | grep -B40 -F -- "${error:-no error line}" | grep -E '^\s*File "' | tail -1 \
           | sed -E 's|^\s*File "([^"]*)", line ([0-9]+).*|\1:\2|; s|.*/upstream/||; s|.*/site/||; s|.*/site-packages/||; s|.*/otca_patch/|otca_patch/|')"
  echo "${error:0:240}${where:+ (at $where)}"
}
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
one_run() {  # TARGET UPSTREAM_NAME WORLD LAUNCHER -> one PASS/FAIL line in $work/TARGET-worldWORLD.line
  local target="$1" name="$2" world="$3" launcher="$4" label out upstream status seconds why t0 launch
  label="$(printf '%-26s world %s' "$target" "$world")"
  out="$work/runs/$target-world$world"
  upstream="${upstreams[$name]:-}"
  if [ -z "$upstream" ] || [ ! -d "$upstream" ]; then
    echo "FAIL $label: no $name checkout (its snapshot is not in $payload/upstream)" > "$out.line"; return
  fi
  t0=$(date +%s)
  if [ "$launcher" = accelerate ]; then
    launch=("$python" -m accelerate.commands.launch --num_processes "$world" --multi_gpu --main_process_port "$(free_port)")
  else
    launch=("$python" -m torch.distributed.run --standalone --nproc_per_node "$world")
  fi
  (cd "$work/runs" && OTCA_SMOKE_DEVICE="$device" OTCA_SMOKE_METER=1 timeout -k 10 "$run_limit" \
    "${launch[@]}" -m otca_patch.smoke "$upstream" "$out" --target "$target" --otca) > "$out.log" 2>&1
  status=$?
  seconds=$(( $(date +%s) - t0 ))
  if [ $status -ne 0 ]; then
    why="$(cause "$out.log")"
    [ $status -ge 124 ] && [ $status -le 137 ] && [ $seconds -ge "$run_limit" ] && why="over the ${run_limit} s limit"
    echo "FAIL $label (${seconds} s): exit $status: ${why:-see $out.log}" > "$out.line"; return
  fi
  if ! "$python" "$here/scripts/check_run_log_credit.py" "$out" --processes "$world" > "$out.credit" 2>&1; then
    echo "FAIL $label (${seconds} s): the run log differs from the credit engine: $(tail -1 "$out.credit" | cut -c1-200)" > "$out.line"
    return
  fi
  echo "PASS $label (${seconds} s): credit matches the engine; $("$python" -m otca_patch.tools.layer_meter "$out" 2>&1 | tail -1)" > "$out.line"
}
mkdir -p "$work/runs"
runs=()
not_run=()
while read -r target name least launcher; do
  if [ -z "${upstreams[$name]+set}" ]; then  # a fork's trainer: its code is never shipped (docs/dancegrpo.md)
    not_run+=("NOT RUN $(printf '%-26s' "$target") its upstream, $name, is a fork: the check carries DanceGRPO, flow_grpo and MixGRPO only")
    continue
  fi
  ran=0
  for world in "${worlds[@]}"; do
    [ "$world" -ge "$least" ] && runs+=("$target $name $world $launcher") && ran=1
  done
  if [ "$ran" = 0 ]; then
    if [ "$rehearse" = 1 ]; then runs+=("$target $name $least $launcher")  # CPU processes stand in for the GPUs
    else not_run+=("NOT RUN $(printf '%-26s' "$target") needs $least processes, one GPU each (this machine has $gpus): upstream's main runs on no fewer")
    fi
  fi
done < "$work/targets.txt"
say "${#runs[@]} runs, $jobs at a time, each at most ${run_limit} s; logs in $work/runs"
failed=0
printed=0
report_done() {  # print, in order, the lines of the runs that have finished
  while [ "$printed" -lt "${#runs[@]}" ]; do
    set -- ${runs[$printed]}
    [ -f "$work/runs/$1-world$3.line" ] || break
    cat "$work/runs/$1-world$3.line"
    grep -q '^PASS' "$work/runs/$1-world$3.line" || failed=1
    printed=$((printed + 1))
  done
}
# the runs of 2+ processes first (the longest): the last wave is short
[ "${#runs[@]}" -gt 0 ] && mapfile -t runs < <(printf '%s\n' "${runs[@]}" | awk '{print ($3 > 1 ? 0 : 1), $0}' | sort -s -k1,1n | cut -d' ' -f2-)
for entry in "${runs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; report_done; done
  one_run $entry &
done
wait
report_done
# the VeRL-Omni plug-in (docs/verl-omni.md): its training step needs VeRL-Omni's own GPU environment
not_run+=("NOT RUN $(printf '%-26s' verl-omni) the payload carries no VeRL-Omni environment (vLLM 0.27.0 and vllm-omni, CUDA builds of several GB, and a diffusion model); its CPU check is scripts/check_upstream_env.sh verl-omni")
[ "${#not_run[@]}" -gt 0 ] && printf '%s\n' "${not_run[@]}"

# ---- the launch rehearsal: upstream's own launch script end to end, set-up lines included, with no
# wrapper, under `otca-patch launch` and under --otca (python -m otca_patch.rehearsal), on this device
launch_limit="${OTCA_GPU_CHECK_LAUNCH_S:-$( [ "$rehearse" = 1 ] && echo 1500 || echo 240)}"
# On the CPU stand-in for the GPU machine (torch 2.11), upstream's FSDP checkpoint save cannot gather
# its full state dict (setStorage: "out of bounds for storage of size 0"), and Qwen-Image's FSDP run
# segfaults: those targets run on the GPU and, on the CPU, in the dev environment's rehearsal
# (scripts/launch_rehearsal.sh; in CI, the suite's upstream tests rehearse each target), not in this rehearsal.
cpu_standin_gaps="dancegrpo-flux dancegrpo-hunyuan mixgrpo-flux flowgrpo-qwenimage"
# On the GPU, one target per upstream by default (three launches each fit the call's minutes);
# OTCA_GPU_CHECK_LAUNCH_TARGETS names others, or the targets given on the command line do.
launch_asked=("$@")
if [ "$#" = 0 ] && [ "$rehearse" = 0 ]; then
  read -r -a launch_asked <<<"${OTCA_GPU_CHECK_LAUNCH_TARGETS:-dancegrpo-flux flowgrpo-sd3 mixgrpo-flux}"
fi
if [ "$rehearse" = 1 ]; then
  for target in $cpu_standin_gaps; do
    [ "$#" -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$target" && continue  # not asked for
    not_run+=("NOT RUN $(printf '%-26s' "$target") launch rehearsal on the CPU stand-in (torch 2.11): its FSDP run fails on the CPU there; it runs on the GPU, and in scripts/launch_rehearsal.sh")
    echo "${not_run[-1]}"
  done
fi
if ! launch_targets="$("$python" -c '
import sys
from otca_patch.rehearsal.__main__ import families
known = families()
skip = set(sys.argv[1].split()) if sys.argv[1] else set()
asked = sys.argv[2:]
print(" ".join(t for t in (asked or known) if t in known and t not in skip) or "-")' \
    "$( [ "$rehearse" = 1 ] && echo "$cpu_standin_gaps")" "${launch_asked[@]}" 2> "$work/launch_targets.err")"; then
  failed=1; echo "FAIL launch rehearsal: $(tail -1 "$work/launch_targets.err")"
elif [ "$launch_limit" = 0 ]; then
  say "launch rehearsal: left out (OTCA_GPU_CHECK_LAUNCH_S=0)"
elif [ "$launch_targets" = - ]; then
  say "launch rehearsal: none of the targets asked is rehearsed"
else
  t0=$(date +%s)
  (cd "$work" && OTCA_UPSTREAM_DANCEGRPO="${upstreams[DanceGRPO]:-}" OTCA_UPSTREAM_FLOW_GRPO="${upstreams[flow_grpo]:-}" \
    OTCA_UPSTREAM_MIXGRPO="${upstreams[MixGRPO]:-}" timeout -k 10 "$launch_limit" \
    "$python" -m otca_patch.rehearsal --device "$device" --out "$work/launch" $launch_targets) > "$work/launch.log" 2>&1
  status=$?
  grep -E '^(PASS|FAIL|NOT RUN) ' "$work/launch.log"
  if [ $status -ne 0 ]; then
    failed=1
    grep -q '^launch rehearsal: failed' "$work/launch.log" \
      || echo "FAIL launch rehearsal ($(( $(date +%s) - t0 )) s): exit $status$( [ $status -ge 124 ] && echo ", over its ${launch_limit} s limit"): $(tail -1 "$work/launch.log" | cut -c1-200)"
  fi
  say "launch rehearsal: $(( $(date +%s) - t0 )) s; logs in $work/launch"
fi

# ---- the benchmarks: the credit's share of a FLUX-scale step, and the layer's memory
bench() {  # LABEL LIMIT SCRIPT ARGS...
  local label="$1" limit="$2" t0 status; shift 2
  t0=$(date +%s)
  (cd "$work" && timeout -k 10 "$limit" "$python" "$@") > "$work/$label.log" 2>&1
  status=$?
  if [ $status -eq 0 ]; then
    echo "PASS $(printf '%-35s' "$label") ($(( $(date +%s) - t0 )) s): $(grep -v '^\s*$' "$work/$label.log" | tail -1 | cut -c1-200)"
    sed 's/^/    /' "$work/$label.log" | tail -12
  else
    failed=1
    echo "FAIL $(printf '%-35s' "$label") ($(( $(date +%s) - t0 )) s): exit $status: $(grep -E 'Error|error' "$work/$label.log" | tail -1 | cut -c1-200)"
  fi
}
if [ "$rehearse" = 1 ]; then
  bench bench_gpu.py 300 "$here/scripts/bench_gpu.py" --tiny --json "$work/bench_gpu.json"
  bench bench_memory.py 300 "$here/scripts/bench_memory.py" --scale 0.05 --steps 2 --json "$work/bench_memory.json"
else
  bench bench_gpu.py 150 "$here/scripts/bench_gpu.py" --repeats 3 --json "$work/bench_gpu.json"
  bench bench_memory.py 100 "$here/scripts/bench_memory.py" --json "$work/bench_memory.json"
fi
if [ -n "${OTCA_GPU_CHECK_KEEP:-}" ]; then  # one file (the GPU call brings back at most 8)
  tar czf "$OTCA_GPU_CHECK_KEEP/gpu_check_logs.tar.gz" -C "$work" --exclude=site --exclude=upstream . \
    && say "logs, run logs and bench figures: $OTCA_GPU_CHECK_KEEP/gpu_check_logs.tar.gz"
fi
[ "$rehearse" = 1 ] && say "$payload_size"
say "$( [ "$failed" = 0 ] && echo "every run PASSED" || echo "FAILED" )$( [ "${#not_run[@]}" -gt 0 ] && echo " (${#not_run[@]} target(s) NOT RUN, above)" ) in $(( $(date +%s) - started )) s" \
    "(wall time, $( [ "$rehearse" = 1 ] && echo "rehearsal on the CPU" || echo "on the GPU" )); logs in $work"
return $failed
}
main "$@"; exit $?  # on one line: bash has read it before main runs
