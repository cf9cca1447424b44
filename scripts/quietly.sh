# Sourced by setup.sh: `quietly LOG COMMAND ...` runs COMMAND with its output appended to LOG, shows
# nothing when it succeeds, and when it fails shows the command, the last lines of LOG and where the
# whole log is, then fails (set-up output is pip's: hundreds of lines worth reading only on failure).
quietly() {
  local log="$1"
  shift
  mkdir -p "$(dirname "$log")"
  echo "\$ $*" >> "$log"
  if ! "$@" >> "$log" 2>&1; then
    echo "setup: failed: $*" >&2
    tail -n 40 "$log" | sed 's/^/  | /' >&2
    echo "setup: the whole output is in $log" >&2
    return 1
  fi
}
