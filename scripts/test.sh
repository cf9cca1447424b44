#!/usr/bin/env bash
# The README's test command: set up .venv if needed, then run the whole test suite.
# Extra arguments go to pytest (e.g. `./scripts/test.sh -m upstream`). A run that collects no
# test fails: pytest's exit code 5 is not success here.
# `./scripts/test.sh --env NAME` (dancegrpo, flowgrpo or mixgrpo) instead proves the package in that
# upstream's own training environment (scripts/check_upstream_env.sh NAME).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = "--env" ]; then
  [ -n "${2:-}" ] || { echo "usage: $0 --env dancegrpo|flowgrpo|mixgrpo" >&2; exit 2; }
  exec "$repo/scripts/check_upstream_env.sh" "$2"
fi
"$repo/scripts/setup.sh"
cd "$repo"
set +e
"$repo/.venv/bin/python" -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$status"
