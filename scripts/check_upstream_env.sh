#!/usr/bin/env bash
# Prove otca-patch in an upstream's own training environment:
#   scripts/check_upstream_env.sh dancegrpo|flowgrpo
# 1. builds the environment envs/NAME.txt defines (Python 3.10), once: it is cached under
#    $OTCA_ENV_CACHE (default ~/.cache/otca-envs) and reused while the pins file is unchanged;
# 2. installs this repository into it NON-editable, with its dependencies (`pip install <repo>`),
#    and fails when that changed or removed any package the environment had (pip freeze before/after);
# 3. runs, from a folder outside the repository: `otca-patch doctor` on the upstream checkout, and
#    the matching smoke run without and with --otca (DanceGRPO: the FLUX step; FlowGRPO: SD3 on 2
#    processes under `accelerate launch --config_file <upstream's multi_gpu.yaml for 2 CPU
#    processes> -m otca_patch.smoke`), and checks the --otca run log's credit against the credit
#    engine recomputed from the logged rewards and progress;
# 4. uninstalls what step 2 added, so the cached environment stays as its pins define it.
# The upstream checkout: $OTCA_UPSTREAM_DANCEGRPO / $OTCA_UPSTREAM_FLOW_GRPO, the populated
# submodule, or the pinned snapshot in ../shared/upstream/ (unpacked to a temporary folder).
# OTCA_PYTHON310 picks the interpreter (default: pyenv's 3.10, else python3.10 on PATH).
set -euo pipefail
# the whole script is one function, read before it runs: editing the file meanwhile cannot change a run
main() {
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:-}"
case "$name" in
  dancegrpo) upstream_name=DanceGRPO; upstream_var=OTCA_UPSTREAM_DANCEGRPO; marker=fastvideo/train_grpo_flux.py ;;
  flowgrpo) upstream_name=flow_grpo; upstream_var=OTCA_UPSTREAM_FLOW_GRPO; marker=scripts/train_sd3.py ;;
  *) echo "usage: $0 dancegrpo|flowgrpo" >&2; exit 2 ;;
esac
pins="$repo/envs/$name.txt"
say() { echo "check_upstream_env[$name]: $*" >&2; }
seconds() { date +%s; }
started=$(seconds)

# --- the interpreter: Python 3.10, as both upstreams use
python310="${OTCA_PYTHON310:-}"
if [ -z "$python310" ] && command -v pyenv >/dev/null 2>&1; then
  version="$(pyenv versions --bare 2>/dev/null | grep '^3\.10' | tail -1 || true)"
  [ -n "$version" ] && python310="$(PYENV_VERSION="$version" pyenv which python3.10)"
fi
[ -z "$python310" ] && python310="$(command -v python3.10 || true)"
if [ -z "$python310" ]; then
  say "no Python 3.10 found (set OTCA_PYTHON310, or install it: pyenv install 3.10)"; exit 2
fi

# --- 1. the environment, built once per pins file and interpreter
cache="${OTCA_ENV_CACHE:-$HOME/.cache/otca-envs}"
key="$( (cat "$pins"; "$python310" --version) | sha256sum | cut -c1-16)"
env="$cache/$name-$key"
build_log="$cache/$name-$key.build.log"
if [ ! -f "$env/.otca-env-built" ]; then
  say "building $env from envs/$name.txt with $("$python310" --version 2>&1) (first time: several minutes; log $build_log)"
  rm -rf "$env"
  mkdir -p "$cache"
  # marked as built only at the end: an interrupted build is rebuilt, never reused
  if ! {
    "$python310" -m venv "$env" &&
    "$env/bin/python" -m pip install --upgrade "pip<25" "setuptools<76" wheel &&
    # deepspeed's build imports torch and compiles no CUDA op when told so: torch first, no isolation
    # (--no-compile: Python compiles what it imports; compiling all of torch here takes minutes)
    "$env/bin/python" -m pip install --no-compile $(grep -E '^(torch|numpy)==' "$pins") &&
    DS_BUILD_OPS=0 "$env/bin/python" -m pip install --no-compile --no-build-isolation -r "$pins"
  } > "$build_log" 2>&1; then
    tail -30 "$build_log" >&2
    say "FAILED to build the environment (log: $build_log)"; exit 1
  fi
  touch "$env/.otca-env-built"
  say "built in $(( $(seconds) - started )) s"
else
  say "reusing $env (envs/$name.txt unchanged)"
fi
py="$env/bin/python"
"$py" -m pip check >&2 || say "note: pip check reports the conflicts above inside upstream's own pins"

# --- the upstream checkout: the variable, the populated submodule, or the pinned snapshot
work="$(mktemp -d "${TMPDIR:-/tmp}/otca-env-$name-XXXXXX")"
trap 'rm -rf "$work"' EXIT
upstream="${!upstream_var:-}"
[ -z "$upstream" ] && [ -f "$repo/upstream/$upstream_name/$marker" ] && upstream="$repo/upstream/$upstream_name"
if [ -z "$upstream" ]; then
  spec="$(grep -l "^upstream = \"$upstream_name\"" "$repo"/patches/*/*.toml | head -1)"
  commit="$(sed -n 's/^verified_commit = "\(.......\).*/\1/p' "$spec")"
  snapshot="${OTCA_SHARED:-$repo/../shared}/upstream/$upstream_name-$commit.tar.gz"
  if [ ! -f "$snapshot" ]; then
    say "no $upstream_name checkout: set $upstream_var, populate upstream/$upstream_name or put $snapshot beside the repository"
    exit 1
  fi
  tar xzf "$snapshot" -C "$work"
  upstream="$work/$upstream_name"
fi
[ -f "$upstream/$marker" ] || { say "$upstream has no $marker"; exit 1; }
say "upstream checkout: $upstream"

# --- 2. the project, non-editable, with its dependencies; nothing the environment had may change
"$py" -m pip freeze --all > "$work/freeze-before.txt"
install_started=$(seconds)
# the repository as git has it (a copy: a stale build/ folder of the checkout cannot leak into the wheel)
mkdir "$work/otca-patch"
(cd "$repo" && git ls-files -co --exclude-standard -- pyproject.toml README.md otca_patch patches | tar -cf - -T -) \
  | tar -xf - -C "$work/otca-patch"
(cd "$work" && "$py" -m pip install --quiet "$work/otca-patch" 2>&1 | grep -v "^WARNING: Location" >&2 || true)
"$py" -m pip freeze --all > "$work/freeze-after.txt"
say "pip install <repo> took $(( $(seconds) - install_started )) s"
compare_freeze() {  # BEFORE AFTER: prints what changed; fails on a changed or removed package
  "$py" - "$1" "$2" <<'PY'
import re, sys
def read(path):
    packages = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = re.split(r"(==| @ )", line, maxsplit=1)
            packages[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return packages
before, after = read(sys.argv[1]), read(sys.argv[2])
changed = [f"{n} {before[n]} -> {after.get(n, 'removed')}" for n in sorted(before) if after.get(n) != before[n]]
added = [f"{n} {after[n]}" for n in sorted(set(after) - set(before))]
print("pip freeze diff: changed or removed: " + (", ".join(changed) or "none") + "; added: " + (", ".join(added) or "none"))
sys.exit(1 if changed else 0)
PY
}
if ! compare_freeze "$work/freeze-before.txt" "$work/freeze-after.txt"; then
  rm -f "$env/.otca-env-built"  # the cached environment is no longer what its pins define
  say "FAILED: installing otca-patch changed packages of the environment"; exit 1
fi
"$py" -c "import otca_patch" 2>/dev/null || { say "FAILED: otca_patch does not import after pip install"; exit 1; }
restore() {  # uninstall what the install added, so the cached environment stays as its pins define it
  added="$(comm -13 <(sed 's/[=@ ].*//' "$work/freeze-before.txt" | sort) <(sed 's/[=@ ].*//' "$work/freeze-after.txt" | sort))"
  [ -n "$added" ] && "$py" -m pip uninstall --quiet -y $added >/dev/null 2>&1
  "$py" -m pip freeze --all > "$work/freeze-restored.txt"
  cmp -s "$work/freeze-before.txt" "$work/freeze-restored.txt" || rm -f "$env/.otca-env-built"
  rm -rf "$work"
}
trap restore EXIT

# --- 3. in that environment, from a folder outside the repository
cd "$work"
export WANDB_MODE=disabled
bin="$env/bin"
checks=0
run() {  # NAME COMMAND...: run one check, its output in $work/NAME.log, its time reported
  local label="$1"; shift
  local t0; t0=$(seconds)
  if "$@" > "$work/$label.log" 2>&1; then
    checks=$((checks + 1))
    say "ok   $label ($(( $(seconds) - t0 )) s)"
  else
    tail -40 "$work/$label.log" >&2
    say "FAIL $label ($(( $(seconds) - t0 )) s): $*"; exit 1
  fi
}
# every module of the installed package imports on this Python (3.10) and torch; a module may lack
# only what an extra provides. The tests and scripts compile on this Python too.
run import-all "$py" -c '
import importlib, pkgutil, otca_patch
extras = {"open_clip", "hpsv2", "matplotlib", "tqdm", "PIL", "ml_collections", "absl", "peft", "wandb", "cv2",
          "decord", "liger_kernel", "einops", "datasets", "trl", "ImageReward", "fairscale", "timm"}
failed, imported = [], 0
for module in pkgutil.walk_packages(otca_patch.__path__, "otca_patch."):
    if module.name.endswith("__main__") or module.name.startswith("otca_patch.launch.startup"):
        continue
    try:
        importlib.import_module(module.name)
        imported += 1
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in extras:
            print(f"{module.name}: needs {exc.name} (an extra)")
        else:
            failed.append(f"{module.name}: {exc!r}")
    except Exception as exc:
        failed.append(f"{module.name}: {exc!r}")
print(f"{imported} modules imported")
raise SystemExit("\n".join(failed) or None)'
run compile-tests "$py" -c '
import pathlib, sys
files = [p for folder in sys.argv[1:] for p in sorted(pathlib.Path(folder).rglob("*.py"))]
for path in files:
    compile(path.read_text(), str(path), "exec")
print(f"{len(files)} files compile")' "$repo/tests" "$repo/scripts"
run doctor "$bin/otca-patch" doctor "$upstream"
grep -E "hook points hold" "$work/doctor.log" >&2
port=$((29500 + $$ % 400))
if [ "$name" = dancegrpo ]; then
  run smoke-vanilla "$bin/otca-patch" smoke "$upstream" "$work/vanilla" --steps 2
  run smoke-otca "$bin/otca-patch" smoke "$upstream" "$work/otca" --steps 2 --otca
  run credit "$py" "$repo/scripts/check_run_log_credit.py" "$work/otca"
  # two ranks: upstream's ReduceOp.AVG on gloo, and the credit over the gathered batch
  run smoke-otca-2ranks "$py" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" \
    -m otca_patch.smoke "$upstream" "$work/otca2" --steps 1 --otca
  run credit-2ranks "$py" "$repo/scripts/check_run_log_credit.py" "$work/otca2" --processes 2
else
  # FlowGRPO's own DDP launch config, for 2 CPU processes without mixed precision
  "$py" - "$upstream/scripts/accelerate_configs/multi_gpu.yaml" "$work/multi_gpu_cpu.yaml" <<'PY'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
config.update(num_processes=2, mixed_precision="no", use_cpu=True)
yaml.safe_dump(config, open(sys.argv[2], "w"))
PY
  launch=("$bin/accelerate" launch --config_file "$work/multi_gpu_cpu.yaml" --main_process_port "$port" -m otca_patch.smoke)
  run smoke-vanilla "${launch[@]}" "$upstream" "$work/vanilla" --target flowgrpo-sd3
  run smoke-otca "${launch[@]}" "$upstream" "$work/otca" --target flowgrpo-sd3 --otca
  run credit "$py" "$repo/scripts/check_run_log_credit.py" "$work/otca" --processes 2
fi
for side in vanilla otca; do
  [ -f "$work/$side/smoke.json" ] || { say "FAILED: $side wrote no smoke.json"; exit 1; }
  say "smoke $side: $("$py" -c '
import json, sys
result = json.load(open(sys.argv[1]))
losses = result.get("losses") or [s["loss"] for s in result["steps"]]
norms = result.get("grad_norms") or [s["grad_norm"] for s in result["steps"]]
print("world size", result["world_size"], "losses", [round(x, 6) for x in losses],
      "grad norms", [round(x, 6) for x in norms])' "$work/$side/smoke.json")"
done
[ ! -f "$work/vanilla/run_log.jsonl" ] || { say "FAILED: the vanilla run wrote a run log"; exit 1; }
say "passed: $checks checks in $(( $(seconds) - started )) s ($("$py" -c 'import torch, diffusers, transformers, accelerate; print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}")'))"
}
main "$@"; exit $?  # on one line: bash has read it before main runs
