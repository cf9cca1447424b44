#!/usr/bin/env bash
# Prove otca-patch in an upstream's own training environment:
#   scripts/check_upstream_env.sh dancegrpo|flowgrpo|flowgrpo-diffusers|mixgrpo|verl-omni [--build]
# 1. builds the environment envs/NAME.txt defines (Python 3.10, verl-omni 3.11; each `# step:` of the file is one
#    `pip install`, in the order of upstream's own instructions), once: it is cached under
#    $OTCA_ENV_CACHE (default ~/.cache/otca-envs) and reused while the pins file is unchanged;
# 2. installs this repository into it NON-editable, with its dependencies (`pip install <repo>`),
#    and fails when that changed or removed any package the environment had (pip freeze before/after);
#    (verl-omni: then verl and VeRL-Omni from their snapshots in ../shared/upstream/, with --no-deps);
# 3. checks that every module imports there, then runs the README's own commands for NAME verbatim
#    (its `<!-- check_upstream_env: NAME -->` block: doctor, the smoke runs without and with --otca)
#    in the upstream checkout, and checks each --otca run log's credit against the credit engine
#    recomputed from the logged rewards and progress (verl-omni instead: doctor, tests/verl_omni in the
#    environment, and VeRL-Omni's own trainer and reward-loop CPU tests without and with the plug-in);
# 4. uninstalls what step 2 added, so the cached environment stays as its pins define it.
# The upstream checkout: $OTCA_UPSTREAM_DANCEGRPO / _FLOW_GRPO / _MIXGRPO, the populated
# submodule, or the pinned snapshot in ../shared/upstream/ (unpacked to a temporary folder).
# OTCA_PYTHON310 (OTCA_PYTHON311 for verl-omni) picks the interpreter (default: pyenv's, else pythonX.Y on PATH).
# --build: step 1 only (with an overlay's base), then exit; .ci/run builds the environments two at a time
# this way before it checks them one after another.
set -euo pipefail
# the whole script is one function, read before it runs: editing the file meanwhile cannot change a run
main() {
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:-}"
build_only=0
case "${2:-}" in
  '') ;;
  --build) build_only=1 ;;
  *) echo "$0: unknown option '$2' (the only one is --build)" >&2; exit 2 ;;
esac
case "$name" in
  dancegrpo) upstream_name=DanceGRPO; upstream_var=OTCA_UPSTREAM_DANCEGRPO; marker=fastvideo/train_grpo_flux.py ;;
  mixgrpo) upstream_name=MixGRPO; upstream_var=OTCA_UPSTREAM_MIXGRPO; marker=fastvideo/train_grpo_flux.py ;;
  # FlowGRPO: checked at 9745241 (every FlowGRPO spec holds there; docs/flowgrpo-commits.md)
  flowgrpo) upstream_name=flow_grpo; upstream_var=OTCA_UPSTREAM_FLOW_GRPO; marker=scripts/train_sd3.py
    snapshot_commit=9745241 ;;
  # the Kontext / Qwen-Image trainers: envs/flowgrpo.txt with envs/overlays/flowgrpo-diffusers.txt layered on top
  flowgrpo-diffusers) upstream_name=flow_grpo; upstream_var=OTCA_UPSTREAM_FLOW_GRPO; marker=scripts/train_sd3.py
    snapshot_commit=9745241; overlay="$repo/envs/overlays/$name.txt" ;;
  # VeRL-Omni: the plug-in otca_patch.verl_omni (docs/verl-omni.md); Python 3.11 (envs/verl-omni.txt says why)
  verl-omni) upstream_name=verl-omni; upstream_var=OTCA_UPSTREAM_VERL_OMNI
    marker=verl_omni/trainer/diffusion/ray_diffusion_trainer.py; python_version=3.11
    snapshot_installs="verl-8a69493 verl-omni-a1139ba" ;;
  *) echo "usage: $0 dancegrpo|flowgrpo|flowgrpo-diffusers|mixgrpo|verl-omni [--build]" >&2; exit 2 ;;
esac
overlay="${overlay:-}"
base_name="$name"
[ -z "$overlay" ] || base_name="$(sed -n 's/^# overlay-of: //p' "$overlay")"
pins="$repo/envs/$base_name.txt"
say() { echo "check_upstream_env[$name]: $*" >&2; }
seconds() { date +%s; }
started=$(seconds)

# --- the interpreter: Python 3.10, as the upstreams use (verl-omni: 3.11)
python_version="${python_version:-3.10}"
python_var="OTCA_PYTHON${python_version/./}"
interpreter="${!python_var:-}"
if [ -z "$interpreter" ] && command -v pyenv >/dev/null 2>&1; then
  version="$(pyenv versions --bare 2>/dev/null | grep "^${python_version//./\\.}" | tail -1 || true)"
  [ -n "$version" ] && interpreter="$(PYENV_VERSION="$version" pyenv which "python$python_version")"
fi
[ -z "$interpreter" ] && interpreter="$(command -v "python$python_version" || true)"
if [ -z "$interpreter" ]; then
  say "no Python $python_version found (set $python_var, or install it: pyenv install $python_version)"; exit 2
fi

# --- 1. the environment, built once per pins file and interpreter
install_steps() {  # PINS PYTHON FOLDER: each `# step:` of PINS is one `pip install`, in order, as upstream's
  # own instructions run one pip command after another (a later step overrides an earlier pin). A step
  # marked [no-build-isolation] builds its sdists against what is installed (deepspeed imports torch).
  local pins="$1" py="$2" folder="$3"
  rm -rf "$folder"; mkdir -p "$folder"
  awk -v dir="$folder" '/^# step/ {n++; file=sprintf("%s/%02d.txt", dir, n); print > file; next}
                        n && !/^#/ && NF {print > file}' "$pins"
  local step flags
  for step in "$folder"/*.txt; do
    flags=(--no-compile)  # Python compiles what it imports; compiling all of torch here takes minutes
    grep -q '^# step \[no-build-isolation\]' "$step" && flags+=(--no-build-isolation)
    echo "=== $(head -1 "$step")"
    # DS_BUILD_OPS=0: deepspeed's build compiles no CUDA op
    DS_BUILD_OPS=0 "$py" -m pip install "${flags[@]}" -r "$step" || return 1
  done
}
restore_hpsv2_vocabulary() {  # PYTHON FOLDER: hpsv2's PyPI wheel lacks the vocabulary its git checkout has
  local py="$1" folder="$2" target
  target="$("$py" -c 'import importlib.util as u, pathlib; s = u.find_spec("hpsv2")
print(pathlib.Path(s.origin).parent / "src/open_clip/bpe_simple_vocab_16e6.txt.gz" if s else "")')"
  [ -n "$target" ] && [ ! -f "$target" ] || return 0
  "$py" -m pip download --no-deps --quiet open_clip_torch==2.29.0 -d "$folder/wheel" &&
    "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("open_clip/bpe_simple_vocab_16e6.txt.gz", sys.argv[2])' \
      "$folder"/wheel/open_clip_torch-2.29.0-*.whl "$folder/wheel" &&
    cp "$folder/wheel/open_clip/bpe_simple_vocab_16e6.txt.gz" "$target" &&
    echo "=== hpsv2: tokenizer vocabulary restored at $target"
}
install_snapshots() {  # PYTHON FOLDER: the upstreams installed from their snapshots (--no-deps), for verl-omni
  local py="$1" folder="$2" snapshot
  for snapshot in ${snapshot_installs:-}; do
    mkdir -p "$folder/$snapshot" && tar xzf "$snapshots/$snapshot.tar.gz" -C "$folder/$snapshot" &&
      "$py" -m pip install --no-compile --no-deps "$folder/$snapshot"/*/ || return 1
  done
}
snapshots="${OTCA_SHARED:-$repo/../shared}/upstream"
for snapshot in ${snapshot_installs:-}; do
  [ -f "$snapshots/$snapshot.tar.gz" ] || { say "no snapshot $snapshots/$snapshot.tar.gz to install"; exit 1; }
done
cache="${OTCA_ENV_CACHE:-$HOME/.cache/otca-envs}"
key="$( (cat "$pins"; "$interpreter" --version; [ -z "${snapshot_installs:-}" ] || echo "$snapshot_installs") | sha256sum | cut -c1-16)"
env="$cache/$base_name-$key"  # an overlay reuses its base environment's cache entry
build_log="$cache/$base_name-$key.build.log"
if [ ! -f "$env/.otca-env-built" ]; then
  say "building $env from envs/$name.txt with $("$interpreter" --version 2>&1) (first time: several minutes; log $build_log)"
  rm -rf "$env"
  mkdir -p "$cache"
  # marked as built only at the end: an interrupted build is rebuilt, never reused
  if ! {
    "$interpreter" -m venv "$env" &&
    "$env/bin/python" -m pip install --upgrade "pip<25" "setuptools<76" wheel &&
    install_steps "$pins" "$env/bin/python" "$cache/$name-$key.steps" &&
    install_snapshots "$env/bin/python" "$cache/$name-$key.steps" &&
    restore_hpsv2_vocabulary "$env/bin/python" "$cache/$name-$key.steps"
  } > "$build_log" 2>&1; then
    tail -30 "$build_log" >&2
    say "FAILED to build the environment (log: $build_log)"; exit 1
  fi
  touch "$env/.otca-env-built"
  say "built in $(( $(seconds) - started )) s"
else
  say "reusing $env (envs/$base_name.txt unchanged)"
fi
if [ -n "$overlay" ]; then
  # a layer over the base: its own venv, the base's site-packages behind its own (processed with their
  # .pth files), the overlay's steps installed into it with --no-deps (the file pins what they need);
  # pip leaves the base's copies alone ("outside environment"), so the base stays as its pins define it
  layer_key="$( (cat "$pins" "$overlay"; "$interpreter" --version) | sha256sum | cut -c1-16)"
  layer="$cache/$name-$layer_key"
  if [ ! -f "$layer/.otca-env-built" ]; then
    say "building the overlay $layer from envs/overlays/$name.txt over $env"
    rm -rf "$layer"
    base_site="$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    if ! {
      "$interpreter" -m venv "$layer" &&
      layer_site="$("$layer/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" &&
      printf 'import site; site.addsitedir("%s")\n' "$base_site" > "$layer_site/zz-otca-base.pth" &&
      "$layer/bin/python" -m pip install --upgrade "pip<25" &&
      awk '/^# step/ {n++} n && !/^#/ && NF' "$overlay" > "$cache/$name-$layer_key.txt" &&
      "$layer/bin/python" -m pip install --no-compile --no-deps -r "$cache/$name-$layer_key.txt"
    } > "$cache/$name-$layer_key.build.log" 2>&1; then
      tail -30 "$cache/$name-$layer_key.build.log" >&2
      say "FAILED to build the overlay (log: $cache/$name-$layer_key.build.log)"; exit 1
    fi
    touch "$layer/.otca-env-built"
  else
    say "reusing the overlay $layer (envs/overlays/$name.txt unchanged)"
  fi
  # the base's console scripts (accelerate, torchrun, ...) run with the layer's interpreter, so that the
  # README's commands see the overlay's packages
  for script in "$env"/bin/*; do
    [ -f "$layer/bin/${script##*/}" ] && continue
    head -1 "$script" | grep -q "^#!$env/bin/python" || continue
    { echo "#!$layer/bin/python"; tail -n +2 "$script"; } > "$layer/bin/${script##*/}" && chmod +x "$layer/bin/${script##*/}"
  done
  base_env="$env"
  env="$layer"
fi
if [ "$build_only" = 1 ]; then say "built: $env"; exit 0; fi
py="$env/bin/python"
"$py" -m pip check >&2 || say "note: pip check reports the conflicts above inside upstream's own pins"

# --- the upstream checkout: the variable, the populated submodule, or the pinned snapshot
work="$(mktemp -d "${TMPDIR:-/tmp}/otca-env-$name-XXXXXX")"
trap 'rm -rf "$work"' EXIT
upstream="${!upstream_var:-}"
[ -z "$upstream" ] && [ -f "$repo/upstream/$upstream_name/$marker" ] && upstream="$repo/upstream/$upstream_name"
if [ -z "$upstream" ]; then
  spec="$(grep -l "^upstream = \"$upstream_name\"" "$repo"/patches/*/*.toml | head -1 || true)"
  commit="${snapshot_commit:-$( [ -z "$spec" ] || sed -n 's/^verified_commit = "\(.......\).*/\1/p' "$spec")}"
  # no spec yet (a target being written): the one snapshot there is
  snapshot="$(ls "$snapshots/$upstream_name-${commit:-}"*.tar.gz 2>/dev/null | head -1 || true)"
  snapshot="${snapshot:-$snapshots/$upstream_name-${commit:-COMMIT}.tar.gz}"
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
source_dir="$work/otca-patch"
if [ -n "$overlay" ]; then
  # pip's isolated build cannot hide the base site-packages a layer reaches through its .pth file, so the
  # base's setuptools (older than pyproject.toml's build requirement) would build; the base builds the wheel
  "$base_env/bin/python" -m pip wheel --quiet --no-deps -w "$work/wheel" "$work/otca-patch" >&2 \
    || { say "FAILED: the wheel of this repository does not build in $base_env"; exit 1; }
  source_dir="$(ls "$work"/wheel/*.whl)"
fi
(cd "$work" && "$py" -m pip install --quiet "$source_dir" 2>&1 | grep -v "^WARNING: Location" >&2 || true)
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
    kill $(jobs -pr) 2>/dev/null; wait  # checks running beside it (verl-omni) stop with it
    say "FAIL $label ($(( $(seconds) - t0 )) s): $*"; exit 1
  fi
}
# every module of the installed package imports on this Python (3.10) and torch; a module may lack
# only what an extra provides. The tests and scripts compile on this Python too.
run import-all "$py" -c '
import importlib, pkgutil, otca_patch
extras = {"open_clip", "hpsv2", "matplotlib", "tqdm", "PIL", "ml_collections", "absl", "peft", "wandb", "cv2",
          "decord", "liger_kernel", "einops", "datasets", "trl", "ImageReward", "fairscale", "timm",
          "torchvision"}  # of the rewards extra (open_clip needs it): the verl-omni environment has no vision models
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
if [ "$name" = verl-omni ]; then
  # the plug-in's contract on the checkout; tests/verl_omni in this environment (VeRL-Omni imports vLLM,
  # which has no CPU build: an import-only stand-in, tests/verl_omni/vllm_import_stand_in.py); VeRL-Omni's
  # own trainer and reward-loop CPU tests without and with the plug-in loaded, side by side on two cores:
  # every test that passes without it must pass with it
  tests="$repo/tests/verl_omni"
  export PYTHONPATH="$tests:$repo/tests" TORCH_COMPILE_DISABLE=1 WANDB_MODE=disabled OTCA_UPSTREAM_VERL_OMNI="$upstream"
  run doctor "$bin/otca-patch" doctor "$upstream"
  tail -1 "$work/doctor.log" >&2
  # run in the background only: the job is pytest itself (exec), so a failing check beside it can stop it
  upstream_tests() { cd "$upstream" && exec "$py" -m pytest -p vllm_import_stand_in "$@" -p no:cacheprovider \
    -o python_files='*_on_cpu.py' --asyncio-mode=auto -q -rA tests/trainer tests/reward_loop; }
  t0=$(seconds)
  upstream_tests > "$work/upstream-without.log" 2>&1 &
  upstream_tests -p otca_plugin_loaded > "$work/upstream-with.log" 2>&1 &
  run plugin-tests "$py" -m pytest -p vllm_import_stand_in -p no:cacheprovider --rootdir "$repo" --confcutdir "$tests" \
    -o python_files="test_*.py env_test_*.py" -q "$tests"
  tail -1 "$work/plugin-tests.log" >&2
  wait
  say "VeRL-Omni's CPU tests ran in $(( $(seconds) - t0 )) s (both runs, beside tests/verl_omni)"
  run upstream-tests "$py" "$tests/pass_sets.py" "$work/upstream-without.log" "$work/upstream-with.log"
  cat "$work/upstream-tests.log" >&2
  say "passed: $checks checks in $(( $(seconds) - started )) s ($("$py" -c 'from importlib.metadata import version
print(", ".join(f"{name} {version(name)}" for name in ("torch", "verl", "verl-omni", "transformers", "diffusers")))'))"
  exit 0
fi
# The README's own commands for this environment, verbatim (scripts/readme_env_commands.py: the
# doctor and smoke lines of its `<!-- check_upstream_env: NAME -->` block), run in the upstream
# checkout with the environment's bin/ first on PATH (as after `source .../bin/activate`). Each smoke run's folder is emptied first; an --otca run's log is then checked
# against the credit engine, and a vanilla run must have written none.
"$py" "$repo/scripts/readme_env_commands.py" "$repo/README.md" "$name" > "$work/readme-commands.tsv" \
  || { say "FAILED: the README's commands for $name cannot be read"; exit 1; }
say "the README's commands: $(cut -f3 "$work/readme-commands.tsv" | paste -sd ';' | sed 's/;/; /g')"
if [ "$name" = mixgrpo ] && [ ! -d "$repo/otca_patch/patches/mixgrpo" ]; then
  # the mixgrpo-flux target lands from its own branch; until then doctor and the smoke cannot hold
  say "no MixGRPO target in this checkout (otca_patch/patches/mixgrpo/ is missing): doctor and the smoke runs cannot be checked"
  [ "${CI:-}" = true ] && { say "FAILED: under CI=true the MixGRPO environment check needs the mixgrpo-flux target"; exit 1; }
  say "checked the install only ($checks checks; not under CI)"; exit 0
fi
export WANDB_MODE=disabled VIRTUAL_ENV="$env" PATH="$bin:$PATH"
index=0
smoke_dirs=()
while IFS=$'\t' read -r kind out command; do
  index=$((index + 1))
  case "$out" in /*) ;; -) ;; *) out="$upstream/$out" ;; esac
  [ "$kind" = doctor ] || rm -rf "$out"
  run "readme-$index-$kind" bash -c "cd \"\$1\" && $command" _ "$upstream" < /dev/null
  case "$kind" in
    doctor) grep -E "hook points hold" "$work/readme-$index-$kind.log" >&2 || true ;;
    smoke-otca)
      processes="$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["world_size"])' "$out/smoke.json")"
      run "readme-$index-credit" "$py" "$repo/scripts/check_run_log_credit.py" "$out" --processes "$processes" < /dev/null ;;
    smoke-vanilla)
      [ ! -f "$out/run_log.jsonl" ] || { say "FAILED: the vanilla run $out wrote a run log"; exit 1; } ;;
  esac
  [ "$kind" = doctor ] || smoke_dirs+=("$kind $out")
done < "$work/readme-commands.tsv"
[ "${#smoke_dirs[@]}" -gt 0 ] || { say "FAILED: the README gives no smoke command for $name"; exit 1; }
for entry in "${smoke_dirs[@]}"; do
  set -- $entry
  [ -f "$2/smoke.json" ] || { say "FAILED: $1 ($2) wrote no smoke.json"; exit 1; }
  say "$1 $2: $("$py" -c '
import json, sys
result = json.load(open(sys.argv[1]))
losses = result.get("losses") or [s["loss"] for s in result["steps"]]
norms = result.get("grad_norms") or [s["grad_norm"] for s in result["steps"]]
print("world size", result["world_size"], "losses", [round(x, 6) for x in losses],
      "grad norms", [round(x, 6) for x in norms])' "$2/smoke.json")"
done
say "passed: $checks checks in $(( $(seconds) - started )) s ($("$py" -c 'import torch, diffusers, transformers, accelerate; print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, transformers {transformers.__version__}, accelerate {accelerate.__version__}")'))"
}
main "$@"; exit $?  # on one line: bash has read it before main runs
