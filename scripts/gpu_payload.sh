#!/usr/bin/env bash
# Builds .gpu-payload/, the git-ignored folder the GPU call carries (docs/gpu-check.md):
#   .gpu-payload/upstream/<Name>-<commit>.tar.gz  the pinned upstream snapshots the smoke targets run
#                                                 (each spec's verified_commit), from $OTCA_SHARED/upstream
#                                                 (default ../shared/upstream), less data files over 512 KiB
#   .gpu-payload/wheels/*.whl                      envs/gpu-payload.txt, downloaded for the GPU machine
#                                                 (CPython 3.12, manylinux x86-64, no dependencies);
#                                                 its [build] part: pure-Python sdists built into wheels
#   .gpu-payload/MANIFEST                          what is in it and its size
# Rebuilt only where envs/gpu-payload.txt or the specs' commits changed (--force: always). Prints the
# payload's size in MiB; fails when what would travel (the repository's files and the payload) exceeds 64 MiB.
set -euo pipefail
main() {
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
payload="$here/.gpu-payload"
say() { echo "gpu_payload: $*" >&2; }
shared="${OTCA_SHARED:-$here/../shared}/upstream"
force=0; [ "${1:-}" = --force ] && force=1
# the snapshots: one per upstream (a folder of patches/), at the commit most of its specs are verified on
# (FlowGRPO's SD3 spec, verified on ac4c86e, holds on 9745241 too: tests/upstream check both)
snapshots=()
for folder in dancegrpo:DanceGRPO flowgrpo:flow_grpo mixgrpo:MixGRPO; do
  commit="$(sed -n 's/^verified_commit = "\(.......\).*/\1/p' "$here/otca_patch/patches/${folder%%:*}"/[!_]*.toml \
            | sort | uniq -c | sort -rn | awk 'NR == 1 {print $2}')"
  snapshots+=("${folder#*:}-$commit.tar.gz")
done
stamp="$( (grep -v '^#' "$here/envs/gpu-payload.txt"; printf '%s\n' "${snapshots[@]}") | sha256sum | cut -c1-16)"
if [ "$force" = 0 ] && [ -f "$payload/MANIFEST" ] && grep -q "^key $stamp$" "$payload/MANIFEST"; then
  say "up to date ($payload, key $stamp)"
else
  rm -rf "$payload.new"; mkdir -p "$payload.new/upstream" "$payload.new/wheels"
  for snapshot in "${snapshots[@]}"; do
    [ -f "$shared/$snapshot" ] || { say "no $shared/$snapshot (set OTCA_SHARED to the folder holding upstream/)"; exit 1; }
    # the code: the snapshot without its data files over 512 KiB (prompt lists, an aesthetic .pth),
    # which no smoke run reads (each writes its own prompts and tiny weights); 6 MiB less to carry
    python3 - "$shared/$snapshot" "$payload.new/upstream/$snapshot" <<'PY' >&2 || { say "FAILED to repack $snapshot"; exit 1; }
import sys, tarfile
source, target = sys.argv[1:]
dropped = []
with tarfile.open(source) as src, tarfile.open(target, "w:gz", compresslevel=9) as out:
    for member in src:
        if member.isfile() and member.size > 512 * 1024 and not member.name.endswith(".py"):
            dropped.append(f"{member.name} ({member.size // 1024} KiB)")
            continue
        out.addfile(member, src.extractfile(member) if member.isfile() else None)
print(f"gpu_payload: {target.rsplit('/', 1)[-1]}: left out {', '.join(dropped) or 'nothing'}")
PY
  done
  # pip matches each manylinux tag exactly: the tags these wheels are published under
  platforms=()
  for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux2010 manylinux_2_5 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
  done
  # envs/gpu-payload.txt: wheels to download, then after its `# [build]` line sdists to build into wheels
  requirements() { awk -v part="$1" '/^# \[build\]/ {build = 1; next} /^#/ {next}
                                     {sub(/#.*/, ""); if (NF && build == part) print $1}' "$here/envs/gpu-payload.txt"; }
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --abi cp312 --abi abi3 --abi none "${platforms[@]}" -d "$payload.new/wheels" -r <(requirements 0) >&2; then
    say "FAILED to download the wheels of envs/gpu-payload.txt"; exit 1
  fi
  built="$(requirements 1)"
  if [ -n "$built" ] && ! python3 -m pip wheel --quiet --no-deps -w "$payload.new/wheels" $built >&2; then
    say "FAILED to build wheels for: $built"; exit 1
  fi
  # pictures and notebooks over 256 KiB inside a wheel (hpsv2's tests/docs and banner: 6 MiB) are left
  # out of it, with their RECORD lines: no code reads them
  python3 - "$payload.new/wheels" <<'PY' >&2 || { say "FAILED to slim the wheels"; exit 1; }
import pathlib, sys, zipfile
MEDIA = (".png", ".jpg", ".jpeg", ".gif", ".ipynb", ".pdf", ".mp4")
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    with zipfile.ZipFile(wheel) as src:
        drop = {i.filename for i in src.infolist() if i.filename.lower().endswith(MEDIA) and i.file_size > 256 * 1024}
        if not drop:
            continue
        slim = wheel.with_suffix(".slim")
        with zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as out:
            for item in src.infolist():
                if item.filename in drop:
                    continue
                data = src.read(item)
                if item.filename.endswith(".dist-info/RECORD"):
                    data = "".join(line for line in data.decode().splitlines(True)
                                   if line.split(",")[0] not in drop).encode()
                out.writestr(item, data)
    slim.replace(wheel)
    print(f"gpu_payload: {wheel.name}: left out {len(drop)} pictures/notebooks ({', '.join(sorted(drop))[:200]})")
PY
  if ls "$payload.new/wheels" | grep -v -- '-none-any\.whl$\|manylinux\|-py3-none-' | grep . >&2; then
    say "FAILED: the wheels above are not for Linux x86-64 / any platform"; exit 1
  fi
  { echo "key $stamp"; (cd "$payload.new" && find . -type f ! -name MANIFEST | sort | xargs ls -l | awk '{print $5, $9}'); } \
    > "$payload.new/MANIFEST"
  rm -rf "$payload"; mv "$payload.new" "$payload"
  say "built $payload"
fi
# what the GPU call sends: the repository's files (tracked, and untracked that git does not ignore) and the payload
tree="$(cd "$here" && git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)"
carried="$(du -sb "$payload" | cut -f1)"
total=$((tree + carried))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "payload $(mib "$carried") MiB (.gpu-payload) + repository $(mib "$tree") MiB = $(mib "$total") MiB of the call's 64 MiB"
[ "$total" -le $((64 * 1048576)) ] || { say "FAILED: $(mib "$total") MiB would travel, over the call's 64 MiB"; exit 1; }
}
main "$@"; exit $?
