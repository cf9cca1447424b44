"""Every launch form ``otca-patch launch --otca`` has met, with what must come of it: one table.

Each row is a launch script's lines around the stand-in trainer (tests/launch/test_launch_guard.py:
``trainer/train.py`` is the target and writes a marker per completed optimizer step, saying whether
the layer was installed) and its expected outcome:

- ``patched``: the launch ends 0 and every step taken was patched;
- ``refused``: refused up front, in one line, before any process starts;
- ``stopped``: a process that would train without the layer is stopped at its start or first step
  (the watch or the step guard), no unpatched step completes, and the launch ends non-zero;
- ``unguarded``: outside the step guard's scope (docs/launch-guard.md): a checked-in process that
  updates its weights without a ``torch.optim`` optimizer trains without the layer.

A row's ``says`` are parts of the launch's output; ``status`` its exit status. So that no later
change moves one of these forms quietly, a form is added here, not in a test of its own. Each row
costs about 4 s of CPU (torch's import in each process that trains): the rows left unmarked, one per
mechanism, cost under a minute; the others are marked slow."""
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from test_launch import launch
from test_launch_guard import NOT_GRPO_VARIANT, PATCHED_ADVANTAGES, PORT, STEPS, VARIANT, markers, stand_in  # noqa: F401
from test_setup_steps import project, wheels  # noqa: F401  (a fixture)

T = "python trainer/train.py --out steps"
TT = "trainer/train.py --out steps"
V = "trainer/train_variant.py --out steps"  # a derivative no spec covers: not a copy, it starts


@dataclass
class Form:
    line: str
    outcome: str
    says: tuple = ()
    status: int | None = None  # None: 0 for patched and unguarded, 2 for refused, non-zero for stopped
    setup: str = ""  # a change to the checkout (SETUPS)
    marks: tuple = field(default=())


# ---- changes to the checkout some forms need

def _trainer(upstream: Path, old: str, new: str) -> None:
    trainer = upstream / "trainer" / "train.py"
    source = trainer.read_text()
    assert old in source
    trainer.write_text(source.replace(old, new, 1))


DATALOADER = textwrap.dedent('''\
    import torch.utils.data

    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 4
        def __getitem__(self, index):
            return index

    def load(context, persistent):
        loader = torch.utils.data.DataLoader(Items(), num_workers=2, batch_size=1, multiprocessing_context=context,
                                             persistent_workers=persistent)
        return [sorted(int(batch) for batch in loader) for epoch in range(2)]

''')

POOLS = textwrap.dedent('''\
    import concurrent.futures

    def square(value):
        return value * value

    def pools():
        with concurrent.futures.ProcessPoolExecutor(2) as processes, concurrent.futures.ThreadPoolExecutor(2) as threads:
            assert list(processes.map(square, range(4))) == list(threads.map(square, range(4))) == [0, 1, 4, 9]

''')


def loader_workers(context: str, persistent: bool):
    def change(upstream: Path) -> None:
        _trainer(upstream, "def main():", DATALOADER + "def main():\n"
                 f"    assert load({context!r}, {persistent}) == [[0, 1, 2, 3]] * 2")
    return change


def restart_once(upstream: Path) -> None:
    """The first attempt exits 3 before it trains; torchrun's restart trains."""
    _trainer(upstream, "    model = torch.nn.Linear(2, 1)",
             "    attempted = os.path.join(out, 'attempted')\n"
             "    if not os.path.exists(attempted):\n"
             "        open(attempted, 'w').close()\n"
             "        sys.exit(3)\n"
             "    model = torch.nn.Linear(2, 1)")


def exits_3(upstream: Path) -> None:
    _trainer(upstream, 'if __name__ == "__main__":\n    main()', 'if __name__ == "__main__":\n    main()\n    sys.exit(3)')


def variants(upstream: Path) -> None:
    (upstream / "trainer" / "train_variant.py").write_text(VARIANT)
    (upstream / "trainer" / "train_sd3_dpo.py").write_text(NOT_GRPO_VARIANT)
    (upstream / "trainer" / "train_foreach.py").write_text(VARIANT.replace(
        "opt.step()", "with torch.no_grad():\n"
        "                torch._foreach_add_(list(net.parameters()), [p.grad for p in net.parameters()], alpha=-0.1)"))


def renamed_interpreter(upstream: Path) -> None:
    """A venv made with --copies whose python is copied to ``trainer``; it sees this environment's
    packages through a .pth file (as a venv with them installed would)."""
    import shutil
    import subprocess

    made = upstream / "made"
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(made)], check=True, timeout=300)
    shutil.copy2(made / "bin" / "python", made / "bin" / "trainer")
    [site] = made.glob("lib/python*/site-packages")
    (site / "shared.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")


def pool_workers(upstream: Path) -> None:
    _trainer(upstream, "def main():", POOLS + "def main():\n    pools()")


def wandb_offline(upstream: Path) -> None:
    _trainer(upstream, "def main():", "def main():\n    import wandb\n"
             "    run = wandb.init(mode='offline', dir=sys.argv[sys.argv.index('--out') + 1], project='matrix')\n"
             "    run.finish()")


SETUPS = {"restart once": restart_once, "exits 3": exits_3, "renamed interpreter": renamed_interpreter,
          "pools": pool_workers, "wandb offline": wandb_offline,
          **{f"loader {c}{' persistent' if p else ''}": loader_workers(c, p)
             for c in ("fork", "spawn", "forkserver") for p in (False, True)}}

SLOW = (pytest.mark.slow,)
EXEC_I = ("python -c 'import os, sys; os.execv(sys.executable, [sys.executable, \"-I\", \"trainer/train.py\", "
          "\"--out\", \"steps\"])'")
PYTHONPATH_REPLACED = 'PYTHONPATH="' + os.pathsep.join(p for p in sys.path if p and "startup" not in p) + '"'

FORMS = {
    # how the target is launched
    "path": Form(T, "patched"),
    "-m": Form("python -m trainer.train --out steps", "patched"),
    "torchrun": Form(f"torchrun --nproc_per_node 1 --master_port {PORT + 10} trainer/train.py --out steps", "patched", marks=SLOW),
    "torchrun -m": Form(f"torchrun --nproc_per_node 1 --master_port {PORT + 11} -m trainer.train --out steps", "patched", marks=SLOW),
    "accelerate -m": Form("accelerate launch --cpu --num_processes 1 --num_machines 1 --mixed_precision no "
                          "--dynamo_backend no -m trainer.train --out steps", "patched", marks=SLOW),
    # what the trainer starts
    **{f"DataLoader workers, {name}": Form(T, "patched", setup=f"loader {name}",
                                           marks=() if name == "fork" else SLOW)
       for name in ("fork", "fork persistent", "spawn", "forkserver", "spawn persistent")},
    "process and thread pools": Form(T, "patched", setup="pools", marks=SLOW),
    "wandb offline": Form(T, "patched", setup="wandb offline", marks=SLOW),
    # how the script starts it
    "nohup in the background": Form(f"nohup {T} > /dev/null 2>&1 &", "patched", marks=SLOW),
    "setsid": Form(f"setsid {T}", "patched", marks=SLOW),
    "double fork": Form(f"( {T} & )", "patched", marks=SLOW),
    # set-up steps before training: Pythons that never check in and never load torch
    "python -m venv (ensurepip)": Form(f"python -m venv made\n{T}", "patched", marks=SLOW),
    "pip 23 install -e of a setup.py project that burns CPU": Form(
        "python -m venv made\ncd hpslike && ../made/bin/pip install --no-index --find-links WHEELS -e . ; cd ..\n" + T,
        "patched", setup="project hpslike", marks=SLOW),
    "pip wheel of a pyproject project that burns CPU": Form(
        f"cd pyprojlike && {sys.executable} -m pip wheel --no-index --find-links WHEELS --no-deps -w ../dist . ; cd ..\n"
        + T, "patched", setup="project pyprojlike", marks=SLOW),
    # endings
    "torchrun --max_restarts 1, the retry succeeds": Form(
        f"torchrun --nproc_per_node 1 --max_restarts 1 --master_port {PORT + 12} trainer/train.py --out steps",
        "patched", ("note: 1 process failed and was started again, and the next attempt ran to its end; the first failed "
                    "attempt (trainer/train.py, rank 0", "exited with status 3"), setup="restart once", marks=SLOW),
    "a server left running in the background": Form(
        f"python -c 'import time; time.sleep(900)' &\n{T}", "patched",
        ("the trainers have ended; stopped 1 process that ran beside them and still ran: pid ",
         "`python -c 'import time; time.sleep(900)'`")),
    "a trainer's failure the script ignores": Form(
        f"{T} || true", "patched", ("exited with status 3; the launch's top process ended with status 0, ignoring that "
                                    "failure, so the launch ends with status 3",), status=3, setup="exits 3"),
    # Pythons the start-up hook never reaches, running the target: the watch stops each once it loads torch
    "-I": Form(f"python -I {TT}", "stopped", ("started with -I",)),
    "-E": Form(f"python -E {TT}", "stopped", ("started with -E",), marks=SLOW),
    "-S": Form(f'PYTHONPATH="$PYTHONPATH:{os.pathsep.join(p for p in sys.path if p.endswith("site-packages"))}" '
               f"python -S {TT}", "stopped", ("started with -S",), marks=SLOW),
    "env -i": Form(f"env -i PATH=/usr/bin:/bin {sys.executable} {TT}", "stopped", ("does not carry the start-up hook",)),
    "PYTHONPATH replaced": Form(f"{PYTHONPATH_REPLACED} python {TT}", "stopped", ("does not carry the start-up hook",)),
    "a renamed interpreter (venv --copies)": Form(f"made/bin/trainer -I {TT}", "stopped",
                                                  ("`made/bin/trainer -I trainer/train.py", "started with -I"),
                                                  setup="renamed interpreter"),
    "exec in place": Form(EXEC_I, "stopped", ("then replaced its program in place (exec) with",), marks=SLOW),
    "exec in place, address layout fixed": Form(f"setarch $(uname -m) -R {EXEC_I}", "stopped",
                                                ("then replaced its program in place (exec) with",)),
    "perl exec": Form("perl -e 'exec \"python\", \"-I\", \"trainer/train.py\", \"--out\", \"steps\"'", "stopped",
                      ("started with -I",), marks=SLOW),
    "bash exec": Form(f"bash -c 'exec python -I {TT}'", "stopped", ("started with -I",), marks=SLOW),
    "a late detached start": Form(f"nohup setsid env PYTHONPATH=/nowhere python {TT} > /dev/null 2>&1 &", "stopped",
                                  ("PYTHONPATH=/nowhere", "still running after the launch's top process had ended")),
    # Pythons that check in but run no target: the step guard stops the first step
    "a dynamic path to a derivative": Form(f"v=variant; python trainer/train_$v.py --out steps", "stopped",
                                           ("trainer/train_variant.py (pid", "it needs a spec of its own")),
    "a derivative as -m under torchrun": Form(
        f"v=variant; torchrun --nproc_per_node 1 --master_port {PORT + 13} -m trainer.train_$v --out steps", "stopped",
        ("-m trainer.train_variant (pid", "it needs a spec of its own, not --otca_target"), marks=SLOW),
    "a derivative run by python -c": Form(
        "v=variant; python -c \"import runpy, sys; sys.argv = ['x', '--out', 'steps']; "
        "runpy.run_path('trainer/train_$v.py', run_name='__main__')\"", "stopped", ("python -c", "without the layer"), marks=SLOW),
    "a DPO trainer": Form(f"v=sd3_dpo; python trainer/train_$v.py --out steps", "stopped",
                          ("not a GRPO trainer: launch it without --otca",), marks=SLOW),
    "a weight update without torch.optim": Form(f"{T}\nv=foreach; python trainer/train_$v.py --out steps", "unguarded", marks=SLOW),
    # servers outside the launch's tree: refused before anything runs
    "a tmux server running before the launch": Form(f"{T}\ntmux -L pre new-window -t pre 'python {V}'", "refused",
                                                    ("hands work to a tmux server",)),
    "a tmux server the script starts": Form(f"{T}\ntmux -L mine new-session -d 'python {V}'", "refused",
                                            ("hands work to a tmux server",)),
    "a screen session": Form(f"{T}\nscreen -dmS mine python {V}", "refused", ("hands work to a screen server",)),
    "pdsh": Form(f"pdsh -w node1 {T}", "refused", ("starts its trainers through pdsh",)),
}


def _prepared(upstream: Path, form: Form, wheels_folder: Path) -> str:
    variants(upstream)
    if form.setup.startswith("project "):
        name = form.setup.split()[1]
        project(upstream, name, pyproject=name == "pyprojlike", burn=True)
    elif form.setup:
        SETUPS[form.setup](upstream)
    return form.line.replace("WHEELS", str(wheels_folder))


@pytest.mark.parametrize("name", [pytest.param(name, marks=form.marks) for name, form in FORMS.items()])
def test_every_launch_form_ends_as_its_row_says(stand_in, wheels, name):
    form = FORMS[name]
    upstream, env = stand_in
    done = launch(upstream, env, _prepared(upstream, form, wheels), "--otca")
    out = done.stderr
    steps = markers(upstream)
    expected = form.status if form.status is not None else {"patched": 0, "unguarded": 0, "refused": 2}.get(form.outcome)
    if expected is None:
        assert done.returncode != 0, out[-4000:]
    else:
        assert done.returncode == expected, out[-4000:]
    for part in form.says:
        assert part in out, (part, out[-4000:])
    if form.outcome == "refused":
        assert steps == [] and "layer installed" not in out, out[-4000:]
        assert len([line for line in out.splitlines() if line.startswith("otca-patch launch: error: ")]) == 1, out
    elif form.outcome == "unguarded":
        assert any(not step["layer"] for step in steps), steps
    else:  # patched or stopped: no unpatched step completed
        assert all(step["layer"] and step["advantages"] == PATCHED_ADVANTAGES for step in steps), (steps, out[-4000:])
        trained = form.outcome == "patched" or form.line.startswith(T)
        assert len(steps) == (STEPS if trained else 0), (steps, out[-4000:])
    assert not re.search(r"pid (\d+) `pid \1`", out), "a process is named once"


def test_every_row_of_the_matrix_says_how_it_ends():
    assert {form.outcome for form in FORMS.values()} == {"patched", "refused", "stopped", "unguarded"}
    assert all(form.setup in SETUPS or form.setup.startswith("project ") or not form.setup for form in FORMS.values())
