#!/usr/bin/env bash
# The README's test command: set up .venv if needed, then run the whole test suite.
# Extra arguments go to pytest (e.g. `./scripts/test.sh -m upstream`). A run that collects no
# test fails: pytest's exit code 5 is not success here.
# The suite runs on both cores: pytest-xdist with $OTCA_TEST_WORKERS workers (default 2), each group on
# one worker (`--dist loadgroup`; tests/conftest.py makes each test file a group, and the contract tests
# of one upstream target join its file's group): a file's module fixtures and a target's smoke runs are
# made once. OTCA_TEST_WORKERS=1, or your own -n / -p no:xdist, runs it as plain pytest.
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
workers="${OTCA_TEST_WORKERS:-2}"
case "$workers" in ''|*[!0-9]*|0) echo "test.sh: OTCA_TEST_WORKERS must be a whole number >= 1, not '$workers'" >&2; exit 2 ;; esac
parallel=(-n "$workers" --dist loadgroup)
# one torch thread per test process unless told otherwise: the workers (and the smoke runs they start)
# already fill the cores, and two workers of two threads each on two cores ran a smoke in 1.2x the time
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
for arg in "$@"; do
  case "$arg" in -n|-n*|--numprocesses|--numprocesses=*|no:xdist|-pno:xdist) parallel=() ;; esac
done
[ "$workers" -eq 1 ] && parallel=()
set +e
"$repo/.venv/bin/python" -m pytest ${parallel[@]+"${parallel[@]}"} "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$status"
