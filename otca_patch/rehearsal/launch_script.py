"""Upstream's own launch line, read from its launch script, with only the CPU's changes applied."""
from __future__ import annotations

import re
import shlex
from pathlib import Path


def command_span(lines: list[str], launcher: str) -> tuple[int, int]:
    """[start, end) of the physical lines (``keepends``) of the first ``launcher`` command in ``lines``,
    its continuation lines (a line ending in ``\\``) included."""
    for start, line in enumerate(lines):
        if line.strip().split(maxsplit=1)[:1] == [launcher]:
            end = start
            while lines[end].rstrip("\n").endswith("\\") and end + 1 < len(lines):
                end += 1
            return start, end + 1
    raise ValueError(f"no `{launcher}` command in it")


def launcher_line(script: Path, launcher: str = "torchrun") -> list[str]:
    """The words of the first ``launcher`` command in the shell script ``script`` (continuation lines
    joined; a trailing ``\\`` with nothing after it, as DanceGRPO's scripts end, is dropped)."""
    lines = script.read_text().splitlines(keepends=True)
    try:
        start, end = command_span(lines, launcher)
    except ValueError as exc:
        raise ValueError(f"{script}: {exc}") from None
    line = "".join(lines[start:end]).replace("\\\n", " ").strip().removesuffix("\\")
    return shlex.split(line, comments=True)


def split_launcher(words: list[str], script_suffix: str = ".py") -> tuple[list[str], str, list[str]]:
    """(launcher and its options, the script, the script's arguments)."""
    at = next((i for i, w in enumerate(words) if w.endswith(script_suffix)), None)
    if at is None:
        raise ValueError(f"no {script_suffix} script in {' '.join(words)}")
    return words[:at], words[at], words[at + 1:]


def set_options(words: list[str], values: dict[str, str | None]) -> list[str]:
    """``words`` with each ``--name VALUE`` (or ``--name=VALUE``) of ``values`` set to its value; a
    value of None removes the option (and its value); an option not in ``words`` is appended."""
    out, seen, i = [], set(), 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if name in values:
            seen.add(name)
            takes_value = bool(eq) or (i + 1 < len(words) and not words[i + 1].startswith("--"))
            i += 1 if eq or not takes_value else 2
            if values[name] is not None:
                out += [name, values[name]] if takes_value else [name]
            continue
        out.append(word)
        i += 1
    for name, value in values.items():
        if name not in seen and value is not None:
            out += [name, value]
    return out


def shell_variables(script: Path) -> dict[str, str]:
    """The script's plain ``name=value`` assignments: a value that refers to anything (``$port``,
    ``$(command)``) is left out, so what it names stays unexpanded."""
    variables = {}
    for line in script.read_text().splitlines():
        name, eq, value = line.strip().partition("=")
        if eq and name.isidentifier() and "$" not in value:
            words = shlex.split(value, comments=True)
            variables[name] = words[0] if words else ""
    return variables


def expanded_launcher_line(script: Path, launcher: str = "torchrun") -> list[str]:
    """``launcher_line`` of a script that builds its command from variables inside a remote-shell
    string (MixGRPO's ``pdsh ... "...; torchrun ... "``): each ``$name`` of ``shell_variables`` is
    expanded (one escaped for the remote shell, ``\\$name``, is the remote's: left out with its option
    by the caller), and the quote closing the remote string is dropped."""
    variables = shell_variables(script)
    text = script.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if line.split(maxsplit=1)[:1] != [launcher]:
            continue
        line = re.sub(r"(?<!\\)\$\{?(\w+)\}?", lambda m: shlex.quote(variables.get(m.group(1), m.group(0))), line)
        line = line.replace("\\$", "$")
        if line.count('"') % 2:
            line = line[:line.rindex('"')]
        return shlex.split(line)
    raise ValueError(f"{script}: no `{launcher}` command in it")


def option_value(words: list[str], option: str) -> str:
    """The value given to ``option`` in ``words`` (``--name VALUE``)."""
    return words[words.index(option) + 1]
