"""scripts/setup.sh's quiet install: ``quietly LOG COMMAND`` (scripts/quietly.sh) shows nothing of a
command that succeeds and keeps its output in LOG; a command that fails shows its last lines, where
the whole log is, and fails the set-up."""
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def quietly(tmp_path, command: str) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail\n. "{REPO}/scripts/quietly.sh"\nquietly "{tmp_path}/setup.log" bash -c \'{command}\'\necho after'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)


def test_a_command_that_succeeds_shows_nothing_and_its_output_is_kept(tmp_path):
    done = quietly(tmp_path, 'for i in $(seq 124); do echo "WARNING: pip noise $i" >&2; done; echo installed')
    assert done.returncode == 0 and done.stdout == "after\n" and done.stderr == ""
    log = (tmp_path / "setup.log").read_text()
    assert "WARNING: pip noise 124" in log and "installed" in log


def test_a_command_that_fails_shows_its_last_lines_and_the_log_and_stops_the_set_up(tmp_path):
    done = quietly(tmp_path, 'for i in $(seq 100); do echo "line $i"; done; echo "ERROR: no matching distribution" >&2; exit 3')
    assert done.returncode != 0 and "after" not in done.stdout  # set -e: the set-up stops there
    assert "setup: failed: bash -c" in done.stderr
    assert "ERROR: no matching distribution" in done.stderr and "line 99" in done.stderr
    assert "line 1\n" not in done.stderr  # the tail, not the whole output
    assert f"the whole output is in {tmp_path}/setup.log" in done.stderr


def test_setup_sh_runs_every_pip_install_through_quietly():
    lines = [line.strip() for line in (REPO / "scripts" / "setup.sh").read_text().splitlines()]
    installs = [line for line in lines if "pip install" in line and not line.startswith("#")]
    assert installs and all(line.startswith('quietly "$log"') for line in installs), installs
