"""A hung smoke process names where each of its threads is: on the launcher's SIGTERM, and by itself
after OTCA_SMOKE_HANG_S seconds (then exit status 1)."""
import os
import signal
import subprocess
import sys

import pytest

from otca_patch.smoke import hang_report

STUCK = """
import threading, time
from otca_patch.smoke import hang_report
inside = threading.Event()
def waiting_for_a_reward():
    inside.set()
    time.sleep(120)
threading.Thread(target=waiting_for_a_reward, daemon=True).start()
inside.wait()
def waiting_in_a_collective():
    hang_report.arm()  # both threads are inside their functions from here on
    print("armed", flush=True)
    time.sleep(120)
waiting_in_a_collective()
"""


def stuck_process(**env):
    return subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})


def test_a_process_past_the_limit_prints_every_threads_stack_and_exits_1():
    process = stuck_process(**{hang_report.HANG_ENV: "1"})
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "Timeout (0:00:01)!" in err
    assert "waiting_in_a_collective" in err and "waiting_for_a_reward" in err


def test_sigterm_prints_every_threads_stack_then_ends_the_process_as_sigterm_does():
    process = stuck_process(**{hang_report.HANG_ENV: "0"})
    assert process.stdout.readline().strip() == "armed"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM
    assert "waiting_in_a_collective" in err and "waiting_for_a_reward" in err


@pytest.mark.parametrize("value, seconds", [("", hang_report.DEFAULT_HANG_S), ("0", 0.0), (" 30 ", 30.0)])
def test_the_limit_is_read_from_the_environment(monkeypatch, value, seconds):
    monkeypatch.setenv(hang_report.HANG_ENV, value)
    assert hang_report.hang_limit() == seconds


@pytest.mark.parametrize("value", ["ten", "-5"])
def test_a_bad_limit_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(hang_report.HANG_ENV, value)
    with pytest.raises(ValueError, match=f"{hang_report.HANG_ENV}='{value}'"):
        hang_report.hang_limit()


def test_the_smoke_refuses_a_bad_limit_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "otca_patch.smoke", str(tmp_path), str(tmp_path / "out")],
                          capture_output=True, text=True, env={**os.environ, hang_report.HANG_ENV: "soon"})
    assert done.returncode == 2
    assert f"{hang_report.HANG_ENV}='soon' is not a number of seconds" in done.stderr
    assert not (tmp_path / "out").exists()
