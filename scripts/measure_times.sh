#!/usr/bin/env bash
# Measures, on this machine with its present load, each wall time the README and docs state, and
# prints one line per stage: wall time, CPU time (user + sys of every process it started) and the
# 1-minute load average before and after. Stages (default: all but setup, in this order):
#   help   `otca-patch COMMAND --help` for every command (the CPU each costs)
#   eval   `otca-patch eval --smoke` (tiny models, end to end)
#   ab     the README's CPU A/B on a copy of DanceGRPO's FLUX trainer (`--otca_target`, 6 steps)
#   quick  `./scripts/test.sh -m quick` (OTCA_TEST_WORKERS workers, as there)
#   demo   `./scripts/demo.sh` (about half an hour on a loaded 2-core machine)
#   setup  `./scripts/setup.sh` in a fresh clone (a new .venv: downloads every dependency)
# Usage: scripts/measure_times.sh [STAGE ...]. The code measured is this repository's (PYTHONPATH);
# its .venv must exist (scripts/setup.sh) for every stage but setup. Work files go to a temp folder.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(help eval ab quick demo)
python="$repo/.venv/bin/python"
work="$(mktemp -d /tmp/otca-measure-times.XXXXXX)"
shared="${OTCA_SHARED:-$repo/../shared}"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
echo "measure_times: $(nproc) cores; work files in $work" >&2

load1() { cut -d" " -f1 /proc/loadavg; }

# timed NAME COMMAND ...: runs COMMAND (output to $work/NAME.log) and prints its wall and CPU time.
timed() {
  local name="$1"
  shift
  local before after status start end
  before="$(load1)"
  start="$(date +%s.%N)"
  set +e
  /usr/bin/time -f "%U %S" -o "$work/$name.cpu" "$@" > "$work/$name.log" 2>&1
  status=$?
  set -e
  end="$(date +%s.%N)"
  after="$(load1)"
  "$python" - "$name" "$start" "$end" "$work/$name.cpu" "$before" "$after" "$status" <<'EOF'
import sys
name, start, end, cpu_file, before, after, status = sys.argv[1:]
wall = float(end) - float(start)
user, system = (float(x) for x in open(cpu_file).read().split()[-2:])
shown = f"{wall / 60:.1f} min" if wall >= 120 else f"{wall:.1f} s"
failed = "" if status == "0" else f"; FAILED (exit {status})"
cpu = user + system
cpu_shown = f"{cpu:.2f}" if cpu < 10 else f"{cpu:.0f}"  # a --help costs a fraction of a second
print(f"measure_times: {name:<6} wall {shown:>9} ({wall:.0f} s), CPU {cpu_shown} s, "
      f"load {before} -> {after}{failed}", flush=True)
EOF
  [ "$status" -eq 0 ] || tail -n 20 "$work/$name.log" | sed 's/^/  | /' >&2
}

dancegrpo_checkout() {
  # the pinned DanceGRPO snapshot, with a copy of its FLUX trainer as a researcher's own version
  local dir="$work/upstream"
  if [ ! -d "$dir/DanceGRPO" ]; then
    mkdir -p "$dir"
    tar -xzf "$shared/upstream/DanceGRPO-15cc71d.tar.gz" -C "$dir"
    cp "$dir/DanceGRPO/fastvideo/train_grpo_flux.py" "$dir/DanceGRPO/fastvideo/train_grpo_flux_mine.py"
  fi
  echo "$dir/DanceGRPO"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    help)
      commands="$("$python" -c 'from otca_patch.cli import COMMANDS; print(" ".join(COMMANDS))')"
      for command in $commands; do
        timed "help-$command" "$python" -m otca_patch.cli "$command" --help
      done ;;
    eval)
      timed eval "$python" -m otca_patch.cli eval --smoke --out "$work/eval" ;;
    ab)
      checkout="$(dancegrpo_checkout)"
      timed ab bash -c "cd '$checkout' && '$python' -m otca_patch.cli ab --out '$work/ab' --smoke . --steps 6 \
        --otca_target dancegrpo-flux=fastvideo/train_grpo_flux_mine.py" ;;
    quick)
      # as scripts/test.sh runs it: OTCA_TEST_WORKERS pytest-xdist workers (default 2), 1 = plain pytest
      workers="${OTCA_TEST_WORKERS:-2}"
      parallel=(-n "$workers" --dist loadfile)
      [ "$workers" -ne 1 ] || parallel=(-p no:xdist)
      timed quick env OTCA_SHARED="$shared" "$python" -m pytest "${parallel[@]}" -m quick -q -p no:cacheprovider "$repo/tests"
      grep -E "passed|failed" "$work/quick.log" | tail -n 1 | sed 's/^/measure_times: quick  /' ;;
    demo)
      timed demo "$python" -m otca_patch.cli demo --out "$work/demo" ;;
    setup)
      git clone -q "$repo" "$work/clone"
      timed setup "$work/clone/scripts/setup.sh" ;;
    *)
      echo "measure_times: unknown stage '$stage' (help, eval, ab, quick, demo, setup)" >&2
      exit 2 ;;
  esac
done
