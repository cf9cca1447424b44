"""Every rank or none: the ranks of one job must all run the layer, the same way, or none may train.

A rank launched without the layer (a node whose launch skipped ``scripts/otca_run.sh``, or lost the
environment) runs upstream's own collectives while a patched rank runs the layer's: gloo aborts
with a size mismatch after a whole rollout, NCCL hangs or moves wrong bytes. Different ``--otca_*``
flags on different ranks would train a credit no rank computed. So, right after the trainer's
``init_process_group`` (before any rollout, and before the layer's first collective), each patched
rank writes what it runs into the store of the process group the launcher built (layer version,
target, spec and upstream-file hashes, flags, the sha256 of each reward checkpoint's whole content, host)
and waits for all ``world_size`` entries. The window is the job's: it is counted from the first
rank's registration (its wall-clock time, kept in the store by ``compare_set``), and lasts as long as
the trainer's own process group would wait (its ``init_process_group`` timeout: 10 minutes under
NCCL by default, 30 under gloo), or ``--otca_rank_check_timeout``. ``init_process_group`` has no
barrier, so nodes whose cold starts differ by minutes still meet. A missing or different rank stops
every patched rank with a ``RankError`` naming the ranks, their hosts and what differs.

Only store ``set`` / ``check`` / ``get`` / ``compare_set`` are used, never a collective: a patched rank must not enter
a collective an unpatched rank will not match. The unpatched rank meanwhile blocks in upstream's
first collective; when the patched ranks exit, torchrun's agent tears the group down (and gloo's
peers see their connections close), so it ends too.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
from typing import Optional

import torch.distributed as dist

from ..hooks.errors import PatchError

#: where the entries live in the process group's store (``v1``: this entry format)
KEY_PREFIX = "otca_patch/rank_check/v1"
#: flags that may differ between ranks: node-local paths and devices, and this check's own patience
#: (checkpoint paths too, and reward options naming a path: those files are compared by content, ``entry``'s
#: ``checkpoints``)
LOCAL_FLAGS = ("otca_log_dir", "otca_reward_device", "otca_rank_check_timeout", "otca_reward_ckpt")
#: what an entry holds besides the flags, with the words a message uses for it
COMPARED = (("layer", "otca-patch version"), ("target", "target"), ("spec_sha256", "spec sha256"),
            ("file_sha256", "upstream file sha256"))


class RankError(PatchError):
    """The ranks of one job disagree: a rank runs without the layer, with other flags or another
    upstream file, or holds another batch size. Every patched rank stops before training."""

    def __init__(self, problem: str, file: str = ""):
        RuntimeError.__init__(self, problem)  # the message is the problem: no hook point is at fault
        self.file, self.function, self.anchor, self.problem = file, "", "", problem
        self.verified_commit, self.hook, self.spec, self.kind = "", "every_rank_or_none", "", "rank check"


def entry(config, spec, script: str) -> dict:
    """What this process runs, as the other ranks compare it (JSON-able)."""
    from .. import __version__
    from ..hooks.source import file_sha256

    flags = {name: value for name, value in config.to_dict().items() if name not in LOCAL_FLAGS}
    flags["otca_reward_opt"] = {name: {key: value for key, value in options.items() if not _names_a_path(value)}
                                for name, options in flags.get("otca_reward_opt", {}).items()}
    spec_path = getattr(spec, "path", "")
    return {
        "host": socket.gethostname(), "pid": os.getpid(), "layer": __version__, "target": spec.name,
        "spec_sha256": file_sha256(spec_path) if spec_path and os.path.isfile(spec_path) else "",
        "file_sha256": file_sha256(script), "flags": json.loads(json.dumps(flags)),
        "checkpoints": checkpoint_identities(config),
        # torchrun's layout, to name the host of a rank that never registered
        "local_rank": _env_int("LOCAL_RANK"), "local_world_size": _env_int("LOCAL_WORLD_SIZE"),
    }


def _names_a_path(value) -> bool:
    """A reward option whose value is a file or folder here: compared by content, not by its path."""
    return isinstance(value, str) and bool(value) and os.path.exists(os.path.expanduser(value))


def checkpoint_identities(config) -> dict:
    """``{reward[.parameter]: {path, size, sha256}}`` of every registry reward's checkpoint files,
    resolved as its loader resolves them (``--otca_reward_ckpt``, else ``OTCA_CKPT_*``), and of every
    other ``--otca_reward_opt`` whose value is a path: the whole content of each is hashed, once."""
    from pathlib import Path

    from ..rewards.checkpoints import CheckpointError, identity
    from ..rewards.registry import available, checkpoint_paths

    identities = {}
    for name in config.otca_rewards:
        options = dict(config.otca_reward_opt.get(name, {}))
        for option, value in options.items():
            if _names_a_path(value):
                identities[f"{name}.{option}"] = identity(Path(value).expanduser())
        if name not in available():
            continue
        try:
            paths = checkpoint_paths(name, config.otca_reward_ckpt.get(name), options)
        except CheckpointError:
            continue  # the runtime has refused it already
        for parameter, path in paths.items():
            identities[name if parameter == "checkpoint" else f"{name}.{parameter}"] = identity(path)
    return identities


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def check_ranks(store, rank: int, world_size: int, mine: dict, timeout: float, attempt: str = "0",
                file: str = "", poll: float = 0.1) -> dict:
    """Register ``mine`` as ``rank`` in ``store``, wait until ``timeout`` seconds after the first
    rank's registration for all ``world_size`` entries, and compare them; then every rank says
    whether it goes on, so that a rank whose wait ran out just as the last one registered does not
    stop alone. Returns the summary the run log records; raises ``RankError`` naming every missing
    or different rank."""
    started = time.monotonic()
    keys = [f"{KEY_PREFIX}/{attempt}/{r}" for r in range(world_size)]
    verdicts = [f"{KEY_PREFIX}/{attempt}/verdict/{r}" for r in range(world_size)]
    try:
        first = first_registration(store, f"{KEY_PREFIX}/{attempt}/first")
        deadline = started + max(0.0, first + timeout - time.time())
        store.set(keys[rank], json.dumps({**mine, "rank": rank}))
        missing = _wait_for(store, keys, deadline, poll)
        entries = {r: json.loads(store.get(keys[r])) for r in range(world_size) if r not in missing}
        problems = _missing_ranks(missing, entries, timeout) + _differences(entries)
        store.set(verdicts[rank], "stop" if problems else "go")
        if not problems:
            silent = _wait_for(store, verdicts, max(deadline, time.monotonic() + 5 * poll), poll)
            stopped = sorted(silent + [r for r in range(world_size) if r not in silent and store.get(verdicts[r]) != b"go"])
            problems = [f"{_who(r, entries)} stopped at this check (see its error)" for r in stopped]
    except (RuntimeError, OSError, ValueError) as exc:  # the store's host stopped (another rank failed)
        raise RankError(f"the rank check of rank {rank} ({mine['host']}) lost the process group's store "
                        f"({type(exc).__name__}: {exc}); another rank stopped: see its error", file) from None
    if problems:
        raise RankError(f"the {world_size} ranks of this job do not all run the layer the same way, so every "
                        f"patched rank stops before its first rollout:\n  " + "\n  ".join(problems) +
                        "\n  Run the same launch, through otca-patch launch with the same --otca flags, on every "
                        "node (see docs/multi-node.md).", file)
    return {"world_size": world_size, "hosts": {str(r): entries[r]["host"] for r in sorted(entries)},
            "seconds": round(time.monotonic() - started, 3), "window_s": timeout}


def first_registration(store, key: str) -> float:
    """The wall-clock time of the job's first registration: this one's, unless another rank's is in
    the store already (``compare_set`` sets an absent key only, atomically). Nodes' clocks agree to
    well under a second under NTP, which the window of minutes does not notice."""
    now = repr(time.time())
    try:
        return float(store.compare_set(key, "", now))
    except (AttributeError, NotImplementedError):  # a store without compare_set: this rank's arrival
        return float(now)


def _wait_for(store, keys: list, deadline: float, poll: float) -> list:
    """The indices of ``keys`` still absent from ``store`` at ``deadline`` (store ``check`` only)."""
    missing = list(range(len(keys)))
    while True:
        missing = [r for r in missing if not store.check([keys[r]])]
        left = deadline - time.monotonic()
        if not missing or left <= 0:
            return missing
        time.sleep(min(poll, left))


def _who(rank: int, entries: dict) -> str:
    return f"rank {rank} (host {entries[rank]['host']})"


def _missing_ranks(missing: list, entries: dict, timeout: float) -> list:
    """One line per host with ranks that never registered (their host from a registered rank of the
    same node, where torchrun's layout tells it)."""
    by_host: dict = {}
    for r in missing:
        by_host.setdefault(_host_of(r, entries), []).append(r)
    return [_missing_line(ranks, host, timeout) for host, ranks in by_host.items()]


def _missing_line(ranks: list, host: str, timeout: float) -> str:
    one = len(ranks) == 1
    return (f"{_ranks(ranks)} ({host}) did not register within {timeout:g} s of the first rank's registration: "
            f"{'it runs' if one else 'they run'} without the layer (launched without scripts/otca_run.sh --otca, "
            f"or in an environment without otca-patch, or with a layer that has no rank check), or "
            f"{'it is' if one else 'they are'} slower than {timeout:g} s to get here (raise --otca_rank_check_timeout)")


def _host_of(rank: int, entries: dict) -> str:
    layouts = [e for e in entries.values() if e.get("local_rank") is not None and e.get("local_world_size")]
    for e in layouts:
        first = e["rank"] - e["local_rank"]
        if first <= rank < first + e["local_world_size"]:
            return f"host {e['host']}, the node of rank {e['rank']}"
    return "host unknown: no rank of its node registered" if layouts else "host unknown"


def _ranks(ranks: list) -> str:
    """``rank 3`` / ``ranks 1, 8-15`` (a node's ranks are consecutive)."""
    runs: list = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(
        str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}" for a, b in runs)


def _differences(entries: dict) -> list:
    """One line per rank whose entry differs from the lowest registered rank's, naming each field."""
    if not entries:
        return []
    reference = min(entries)
    base = entries[reference]
    lines = []
    for r in sorted(entries):
        other = entries[r]
        fields = [f"{words} {other[key]} (rank {reference}: {base[key]})" for key, words in COMPARED
                  if other[key] != base[key]]
        fields += _checkpoint_differences(other.get("checkpoints", {}), base.get("checkpoints", {}), reference)
        fields += [f"--{name} {_shown(other['flags'].get(name))} (rank {reference}: {_shown(base['flags'].get(name))})"
                   for name in sorted(set(base["flags"]) | set(other["flags"]))
                   if other["flags"].get(name) != base["flags"].get(name)]
        if fields:
            lines.append(f"{_who(r, entries)} registered with different settings from {_who(reference, entries)}: "
                         f"{'; '.join(fields)}")
    return lines


def _checkpoint_differences(mine: dict, base: dict, reference: int) -> list:
    """A reward checkpoint whose content (size, sha256 of the whole file) differs, each side with its path."""
    def shown(found) -> str:
        if found is None:
            return "(none)"
        return f"{found['path']} ({found['size']} bytes, sha256 {found['sha256'][:12]})"

    return [f"reward checkpoint {name} {shown(mine.get(name))} (rank {reference}: {shown(base.get(name))})"
            for name in sorted(set(mine) | set(base))
            if {k: v for k, v in (mine.get(name) or {}).items() if k != "path"}
            != {k: v for k, v in (base.get(name) or {}).items() if k != "path"}]


def _shown(value) -> str:
    return "(not given)" if value is None else json.dumps(value) if not isinstance(value, str) else value


# ---------------------------------------------------------------------- once per process

class _Pending:
    """The check this process still owes: armed when the runtime is installed, run once."""
    entry: Optional[dict] = None
    timeout: Optional[float] = None  # --otca_rank_check_timeout; None: the process group's own
    group_timeout: Optional[float] = None  # what the trainer's init_process_group was given, in seconds
    file: str = ""
    result: Optional[dict] = None
    error: Optional[RankError] = None  # raised again by every later ensure(): no collective after a failed check


_pending = _Pending()


def arm(mine: dict, timeout: Optional[float], file: str = "") -> None:
    """Owe the check for this process (``mine``: its ``entry``; ``timeout``: its window in seconds,
    ``None`` for the process group's own timeout). It runs now if the trainer's process group exists
    already, else right after ``torch.distributed.init_process_group`` returns."""
    _pending.entry, _pending.timeout, _pending.file, _pending.result, _pending.error = mine, timeout, file, None, None
    if dist.is_available():
        _wrap_init_process_group()
        ensure()


def result() -> Optional[dict]:
    """The summary of this process's check (``None`` before it ran)."""
    return _pending.result


def ensure() -> None:
    """Run the owed check if the process group exists and it has not run yet. Called after
    ``init_process_group`` and, as a guarantee, before each of the layer's own collectives."""
    if _pending.error is not None:
        raise _pending.error
    if _pending.entry is None or _pending.result is not None or not (dist.is_available() and dist.is_initialized()):
        return
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if world_size == 1:
        _pending.result = {"world_size": 1}
        return
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restarted job registers afresh
    try:
        store, where = default_store()
        summary = check_ranks(store, rank, world_size, _pending.entry, window(), attempt, _pending.file)
    except RankError as exc:
        _pending.error = exc
        raise
    _pending.result = {**summary, "store": where}
    if rank == 0:
        print(f"otca-patch: all {world_size} ranks run the same layer, target, spec, upstream file and flags, and "
              f"the same reward checkpoints (checked through {where} in {summary['seconds']:.1f} s; window "
              f"{summary['window_s']:g} s from the first registration)", file=sys.stderr, flush=True)


def window() -> float:
    """The check's window in seconds: ``--otca_rank_check_timeout``, else the timeout the trainer gave
    ``init_process_group``, else torch's default for the group's backend (NCCL 10 min, gloo 30 min)."""
    if _pending.timeout is not None:
        return float(_pending.timeout)
    if _pending.group_timeout is not None:
        return _pending.group_timeout
    c10d = dist.distributed_c10d
    try:
        return c10d._get_default_timeout(dist.get_backend()).total_seconds()
    except Exception:  # private helper: where a torch lacks it, its public default
        return getattr(c10d, "default_pg_timeout").total_seconds()


def default_store():
    """The store of the default process group (torchrun's / accelerate's), and a word on which.

    ``_get_default_store`` is private, so where a torch lacks it the check connects to the
    rendezvous' own TCP store at ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent, or rank 0, hosts it
    for every ``env://`` launch) under a prefix of its own. Without either there is nothing to check
    through, and a patched rank refuses rather than risk a mismatched collective."""
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    if getter is not None:
        return getter(), "the process group's store"
    address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    if address and port.isdigit():
        from datetime import timedelta

        client = dist.TCPStore(address, int(port), is_master=False, timeout=timedelta(seconds=max(window(), 30)))
        return dist.PrefixStore("otca_patch", client), f"the rendezvous store at {address}:{port}"
    raise RankError("this torch has no default store to check the ranks through and no MASTER_ADDR / "
                    "MASTER_PORT rendezvous; launch with torchrun or accelerate", _pending.file)


def _wrap_init_process_group() -> None:
    """``torch.distributed.init_process_group`` runs the owed check as soon as the group exists (the
    trainers call it, or accelerate does, before loading models and long before any rollout)."""
    original = dist.init_process_group
    if getattr(original, "otca_rank_check", False):
        return

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        value = original(*args, **kwargs)
        timeout = kwargs.get("timeout", args[2] if len(args) > 2 else None)  # (backend, init_method, timeout)
        _pending.group_timeout = timeout.total_seconds() if hasattr(timeout, "total_seconds") else None
        ensure()
        return value

    init_process_group.otca_rank_check = True
    dist.init_process_group = init_process_group
    dist.distributed_c10d.init_process_group = init_process_group
