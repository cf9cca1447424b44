"""A fork of a checked-in trainer that the watch finds without the inherited check-in (its descriptor
closed in it, or in the trainer before the fork) still runs the trainer's patched program: it is covered
when its program file, command line and environment are exactly its covered parent's. A process that
changed any of them (an exec with a cleared environment) is not, and the message says what it changed."""
import pytest

from otca_patch.launch import watch

PARENT, CHILD = 4100, 4242
TRAINER = {"exe": b"/env/bin/python", "cmdline": b"python\0-m\0otca_patch.launch.worker\0train.py\0",
           "environ": b"PYTHONPATH=/startup\0OTCA_PATCH_RECORD=/r\0"}


def fake_proc(monkeypatch, child_environ: bytes, parent_checked_in: bool = True):
    stats = {PARENT: ("S", 1000, "700", 1.0), CHILD: ("R", PARENT, "777", 0.1)}
    prints = {PARENT: (TRAINER["exe"], TRAINER["cmdline"], TRAINER["environ"]),
              CHILD: (TRAINER["exe"], TRAINER["cmdline"], child_environ)}
    monkeypatch.setattr(watch, "descendants", lambda root: [PARENT, CHILD])
    monkeypatch.setattr(watch, "stat", lambda pid: stats.get(pid))
    monkeypatch.setattr(watch, "fingerprint", lambda pid: prints.get(pid, ()))
    monkeypatch.setattr(watch, "command_line", lambda pid: ["python", "-m", "otca_patch.launch.worker", "train.py"])
    monkeypatch.setattr(watch, "is_python", lambda pid: True)
    monkeypatch.setattr(watch, "loads_torch", lambda pid: True)
    tokens = {PARENT: {"otca-checkin-1"} if parent_checked_in else set(), CHILD: set()}  # the child lost it
    monkeypatch.setattr(watch, "held_tokens", lambda pid: tokens[pid])
    monkeypatch.setattr(watch, "holds", lambda pid, program: "otca-checkin-1" in tokens[pid])


def tree_with_parent_checked_in(tmp_path, checked_in: bool = True):
    tree = watch.TreeWatch(tmp_path / "record", tmp_path, "OTCA_PATCH_RECORD")
    if checked_in:
        tree.checked = {(str(PARENT), "700"): {"5:otca-checkin-1"}}
        tree.token_names = {"otca-checkin-1"}
    return tree


def test_a_fork_without_the_inherited_check_in_that_runs_its_parents_program_is_covered(monkeypatch, tmp_path):
    fake_proc(monkeypatch, child_environ=TRAINER["environ"])
    assert tree_with_parent_checked_in(tmp_path).late() == []


@pytest.mark.parametrize("own_check_in", [False, True])  # the fork's own at-fork check-in names the lost token
def test_a_child_with_another_environment_is_a_suspect_and_the_message_says_what_it_changed(monkeypatch, tmp_path,
                                                                                         own_check_in):
    fake_proc(monkeypatch, child_environ=b"HOME=/root\0")  # exec'd with a cleared environment
    tree = tree_with_parent_checked_in(tmp_path)
    if own_check_in:
        tree.checked[(str(CHILD), "777")] = {"5:otca-checkin-1"}
    assert tree.late() == [CHILD]
    said = ("it checked in, then replaced its program in place (exec)" if own_check_in
            else f"its parent pid {PARENT}, with the same command line, checked in, but this process holds neither")
    assert said in tree.cause(CHILD)


def test_a_fork_of_a_process_that_never_checked_in_is_a_suspect(monkeypatch, tmp_path):
    fake_proc(monkeypatch, child_environ=TRAINER["environ"], parent_checked_in=False)
    monkeypatch.setattr(watch, "why_unseen", lambda pid, startup, variable: "the start-up hook did not run in it")
    tree = tree_with_parent_checked_in(tmp_path, checked_in=False)
    assert tree.late() == [PARENT, CHILD]
    assert tree.cause(CHILD) == f"it is a fork of pid {PARENT}, which never checked in either: the start-up hook did not run in it"
