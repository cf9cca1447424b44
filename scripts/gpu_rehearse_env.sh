#!/usr/bin/env bash
# Builds (once, cached) the environment that stands in for the GPU machine's python3 in
# `scripts/gpu_check.sh --rehearse`: Python 3.12 and envs/gpu-rehearse.txt from PyPI. Prints the
# interpreter's path on stdout; progress and errors go to stderr. Packages the GPU machine lacks
# (envs/gpu-machine.txt) are removed from it.
#   OTCA_ENV_CACHE (default ~/.cache/otca-envs) holds it as gpu-rehearse-<key>, key = hash of the pins
#   file and the interpreter's version; OTCA_PYTHON312 picks the interpreter (default: pyenv's 3.12).
#   --cached: print the interpreter only if the environment is built already (else exit 5; nothing is built).
set -euo pipefail
main() {
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pins="$repo/envs/gpu-rehearse.txt"
say() { echo "gpu_rehearse_env: $*" >&2; }
python312="${OTCA_PYTHON312:-}"
if [ -z "$python312" ] && command -v pyenv >/dev/null 2>&1; then
  version="$(pyenv versions --bare 2>/dev/null | grep '^3\.12' | head -1 || true)"
  [ -n "$version" ] && python312="$(PYENV_VERSION="$version" pyenv which python3.12)"
fi
[ -z "$python312" ] && python312="$(command -v python3.12 || true)"
[ -n "$python312" ] || { say "no Python 3.12 found (set OTCA_PYTHON312, or: pyenv install 3.12)"; exit 2; }
cache="${OTCA_ENV_CACHE:-$HOME/.cache/otca-envs}"
key="$( (grep -v '^#' "$pins"; "$python312" --version) | sha256sum | cut -c1-16)"
env="$cache/gpu-rehearse-$key"
log="$env.build.log"
if [ "${1:-}" = --cached ]; then
  [ -f "$env/.otca-env-built" ] || { say "not built yet: $env"; exit 5; }
fi
mkdir -p "$cache"
exec 9>"$env.lock"
flock 9  # one build at a time: a second caller waits for the first, then reuses what it built
if [ ! -f "$env/.otca-env-built" ]; then
  say "building $env from envs/gpu-rehearse.txt with $("$python312" --version 2>&1) (first time: several minutes, several GB; log $log)"
  rm -rf "$env"; mkdir -p "$cache"
  # marked as built only at the end: an interrupted build is rebuilt, never reused
  if ! { "$python312" -m venv "$env" &&
         "$env/bin/python" -m pip install --no-compile --upgrade pip wheel &&
         "$env/bin/python" -m pip install --no-compile -r <(grep -v '^#' "$pins"); } > "$log" 2>&1; then
    tail -30 "$log" >&2; say "FAILED to build $env (log $log)"; exit 1
  fi
  touch "$env/.otca-env-built"
  say "built $env"
fi
# what the GPU machine lacks goes (pip pulls in a few extras, e.g. typer's pydantic): checked on every
# call, so an edited envs/gpu-machine.txt holds without a rebuild
extra="$("$env/bin/python" - "$repo/envs/gpu-machine.txt" <<'PY'
import re, sys
from importlib import metadata
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
machine = {norm(line.strip()) for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")}
keep = {"pip", "wheel", "setuptools"}
print(" ".join(sorted({norm(d.metadata["Name"]) for d in metadata.distributions()} - machine - keep)))
PY
)"
if [ -n "$extra" ]; then
  say "removing what the GPU machine lacks: $extra"
  "$env/bin/python" -m pip uninstall --quiet -y $extra >&2
fi
echo "$env/bin/python"
}
main "$@"; exit $?
