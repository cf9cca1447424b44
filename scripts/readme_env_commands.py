"""``readme_env_commands.py README NAME``: the README's own commands for upstream environment NAME, one
per line as ``KIND<TAB>OUT_DIR<TAB>COMMAND`` (KIND: doctor, smoke-vanilla or smoke-otca; OUT_DIR: the
smoke run's folder, ``-`` for doctor), for scripts/check_upstream_env.sh to run verbatim.

They are the doctor and smoke lines of the ```bash block under ``<!-- check_upstream_env: NAME -->``
(the README's "Install into your training environment"), so the check and the README cannot drift apart. The
block's other lines (source, pip install, cd, otca-patch launch) are what the check does itself or
what needs GPUs and weights; any other command is an error, so nothing in the block goes unchecked.
"""
from __future__ import annotations

import re
import shlex
import sys

SKIPPED = (["otca-patch", "launch"], ["pip", "install"])


def commands(text: str, name: str) -> list[tuple[str, str, str]]:
    marker = f"<!-- check_upstream_env: {name} -->"
    if marker not in text:
        raise ValueError(f"README.md has no {marker} before the commands of this environment")
    block = re.search(r"```bash\n(.*?)```", text[text.index(marker):], re.S)
    if block is None:
        raise ValueError(f"README.md: no ```bash block after {marker}")
    found = []
    for line in re.sub(r"\s*\\\n\s*", " ", block.group(1)).splitlines():  # continuation lines joined
        command = re.sub(r"(^|\s+)#.*$", "", line).strip()
        words = shlex.split(command)
        if not words or words[:2] in SKIPPED or words[0] in ("source", "cd", "conda"):
            continue
        module = next((w for w in ("smoke", "otca_patch.smoke") if w in words), None)
        if module is not None:
            out = words[words.index(module) + 2]
            found.append(("smoke-otca" if "--otca" in words else "smoke-vanilla", out, command))
        elif words[:2] == ["otca-patch", "doctor"]:
            found.append(("doctor", "-", command))
        else:
            raise ValueError(f"README.md, {marker}: a command the environment check cannot verify: {command}")
    return found


if __name__ == "__main__":
    try:
        for row in commands(open(sys.argv[1]).read(), sys.argv[2]):
            print("\t".join(row))
    except ValueError as exc:
        sys.exit(str(exc))
