"""The watch reads a process's state through several /proc files, one after another; a process may exec
between two reads. A fork of a checked-in trainer that execs a program without torch (ctypes'
``find_library`` starts ``/sbin/ldconfig -p`` from the trainer, with a cleared environment) holds the
inherited check-in and torch's maps before the exec and neither after it: at no instant did it hold torch
without a check-in, so wherever the exec falls between the watch's reads it is never a suspect."""
import pytest

from otca_patch.launch import watch

CHILD = 4242


class ForkThatExecs:
    """The child's /proc as the watch reads it: the exec happens right after read number ``exec_after``."""

    def __init__(self, exec_after: int):
        self.reads, self.exec_after = 0, exec_after

    def before_exec(self) -> bool:
        self.reads += 1
        return self.reads <= self.exec_after

    def loads_torch(self, pid):
        return self.before_exec()  # the trainer's maps, then ldconfig's

    def held_tokens(self, pid):
        return {"otca-checkin-1"} if self.before_exec() else set()  # the memory file closes on exec


@pytest.mark.parametrize("exec_after", range(0, 7))
def test_a_fork_that_execs_a_program_without_torch_is_never_a_suspect(monkeypatch, tmp_path, exec_after):
    child = ForkThatExecs(exec_after)
    monkeypatch.setattr(watch, "descendants", lambda root: [CHILD])
    monkeypatch.setattr(watch, "stat", lambda pid: ("R", 1000, "777", 0.1))
    monkeypatch.setattr(watch, "command_line", lambda pid: ["/sbin/ldconfig", "-p"])
    monkeypatch.setattr(watch, "loads_torch", child.loads_torch)
    monkeypatch.setattr(watch, "held_tokens", child.held_tokens)
    tree = watch.TreeWatch(tmp_path / "record", tmp_path, "OTCA_RECORD")
    tree.token_names = {"otca-checkin-1"}  # the trainer it forked from checked in
    assert tree.late() == []


def test_a_process_that_loads_torch_without_a_check_in_is_a_suspect(monkeypatch, tmp_path):
    monkeypatch.setattr(watch, "descendants", lambda root: [CHILD])
    monkeypatch.setattr(watch, "stat", lambda pid: ("R", 1000, "777", 0.1))
    monkeypatch.setattr(watch, "command_line", lambda pid: ["python", "-I", "train.py"])
    monkeypatch.setattr(watch, "loads_torch", lambda pid: True)
    monkeypatch.setattr(watch, "held_tokens", lambda pid: set())
    tree = watch.TreeWatch(tmp_path / "record", tmp_path, "OTCA_RECORD")
    tree.token_names = {"otca-checkin-1"}
    assert tree.late() == [CHILD]
