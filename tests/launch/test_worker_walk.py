"""A worker's argv reaches the installed runtime in a short walk: parsed once into the config near
the entry, then the config object travels down. The walk is measured, not assumed: a profiler records,
in call order, the room of each function that is handed the worker's argv (or a list cut from it)
until it is parsed, then the config parsed from it (what is left of the argv goes to the script),
until the rewritten script starts. A method of the config itself (``config.active``) is the config
answering, not a move; a value read from the config and handed on is not the config. A room is a
module of ``launch/``, the hook engine (``hooks``), ``config`` (with ``flags`` and ``target_options``,
its parts), ``targets/registry``, the target's runtime, or another top-level module. A move is a
change of room; a move back up arrives in a room already visited.
"""
import json
import subprocess
import sys
import textwrap

from test_launch import synthetic  # noqa: F401  (a fixture)

#: runs ``worker.main(ARGV)`` under a profiler and prints the rooms it walked through (JSON)
PROBE = textwrap.dedent('''\
    import json, sys
    from otca_patch.config import OtcaConfig
    from otca_patch.launch import worker

    argv = sys.argv[1:]
    script = argv[0]
    walk = []

    def room(module):
        if module == "synthetic_runtime" or module.startswith("otca_patch.targets.") and module != "otca_patch.targets.registry":
            return "runtime"
        parts = module.split(".")
        if parts[0] != "otca_patch" or len(parts) < 2:
            return None
        if parts[1] in ("launch", "targets"):
            return "/".join(parts[1:3])
        return {"flags": "config", "target_options": "config"}.get(parts[1], parts[1])

    def carried(value):
        if isinstance(value, OtcaConfig):
            state["parsed"] = True
            return True
        # before the parse, the argv or a list cut from it (after it, what is left goes to the script)
        return not state["parsed"] and isinstance(value, list) and bool(value) and \\
            all(isinstance(v, str) and v in argv for v in value)

    state = {"done": False, "parsed": False}

    def profile(frame, event, arg):
        if event != "call" or state["done"]:
            return
        code = frame.f_code
        if code.co_filename.endswith(script):
            state["done"] = True  # the rewritten script runs: the runtime is installed
            return
        where = room(frame.f_globals.get("__name__", ""))
        if where is None:
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        values = [frame.f_locals.get(name) for name in names if name != "self"]
        if any(carried(value) for value in values) and (not walk or walk[-1] != where):
            walk.append(where)

    sys.setprofile(profile)
    try:
        worker.main(argv, command="otca-patch run")
    finally:
        sys.setprofile(None)
    print(json.dumps(walk), file=sys.stderr)
''')


def moves(walk: list[str]) -> tuple[int, int]:
    """(moves, moves back up) of a walk of rooms."""
    back_up = sum(1 for at in range(1, len(walk)) if walk[at] in walk[:at])
    return len(walk) - 1, back_up


def test_moves_count_changes_of_room_and_returns():
    assert moves(["launch/worker", "hooks", "launch/runner", "hooks"]) == (3, 1)
    assert moves(["launch/worker"]) == (0, 0)


def worker_walk(upstream, env) -> list[str]:
    argv = ["trainer/train.py", "--out", "result.json", "--otca", "--otca_mode", "tcd"]
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=upstream, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # the rewritten script ran with the runtime installed
    assert json.loads((upstream / "result.json").read_text())["advantages"] == [-6.0, -3.0, 9.0]
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_the_worker_s_argv_reaches_the_runtime_in_at_most_five_moves_with_one_back_up(synthetic):
    walk = worker_walk(*synthetic)
    assert walk[0] == "launch/worker" and "runtime" in walk, walk
    found, back_up = moves(walk)
    assert found <= 5 and back_up <= 1, f"{found} moves, {back_up} back up: {' -> '.join(walk)}"
