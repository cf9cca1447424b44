"""Loaded by every test session.

Under pytest-xdist a worker writes its terminal summary after it has told the controller it is
done, and the controller may then interrupt it (a KeyboardInterrupt inside pytest's hook teardown,
printed as a PluggyTeardownRaisedWarning). Hypothesis' pytest plugin imports ``hypothesis`` in that
summary, which is slow where the worker ran no Hypothesis test; importing it here, at start-up,
leaves the summary nothing slow to do.
"""
import hypothesis  # noqa: F401

import pytest

import upstream_snapshots as snapshots

#: ``./scripts/test.sh -m quick``: a first check in a few minutes on 2 cores (the CLI and its flags, the
#: credit math, the hook engine, the layering), leaving out what runs upstream trainers, launches or
#: the demo. A file's tests marked ``slow`` or ``upstream`` stay out of it.
QUICK_FILES = {
    "test_cli.py", "test_flags.py", "test_config_flags.py", "test_layering.py", "test_setup_script.py",
    "test_credit_conformance.py", "test_credit_errors.py", "test_credit_gapfills.py", "test_credit_options.py",
    "test_credit_summary.py", "test_student_t.py", "test_objective_weights.py", "test_invariants.py",
    "test_hooks_engine.py", "test_anchor_tails.py", "test_spec_extends.py", "test_spec_runtime_contract.py",
    "test_fork_specs.py", "test_trainer_kind.py", "test_smoke_cli.py",
}


#: the longest files (the launch rehearsals, 5 to 9 minutes each on 2 cores), run first: collected in
#: alphabetical order they started late and one xdist worker ran them alone for minutes at the suite's end
FIRST_FILES = ("upstream/test_launch_rehearsal.py", "upstream/test_rehearsal_flowgrpo.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): under pytest-xdist's --dist loadgroup one worker runs a "
                            "group's tests (a test file, or the tests of one upstream target, sharing its smoke runs)")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            # under --dist loadgroup a test file with no group is one group: its module fixtures are made once,
            # as under --dist loadfile; the tests of one target (tests/upstream/contract.py) share its smoke runs
            item.add_marker(pytest.mark.xdist_group(item.path.relative_to(config.rootpath).as_posix()))
        if item.path.name in QUICK_FILES and not any(item.get_closest_marker(name) for name in ("slow", "upstream")):
            item.add_marker(pytest.mark.quick)
    # a stable sort: each file's tests keep their order, and every xdist worker collects the same order
    items.sort(key=lambda item: not item.path.as_posix().endswith(FIRST_FILES))


def _skip_reason(longrepr) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI (``CI=true``) a skipped test fails, whatever skipped it (``upstream_snapshots.missing``, a
    ``skipif`` mark, ``importorskip``): CI runs every test, and a skip there would hide what it did not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and snapshots.in_ci():
        report.outcome = "failed"
        report.longrepr = f"CI=true and this test skipped ({_skip_reason(report.longrepr)}): CI runs every test"


@pytest.fixture(autouse=True)
def _started_in_restored():
    """``otca-patch smoke`` run in-process records where it started in ``$OTCA_STARTED_IN`` (for the paths
    it prints from its run folder); the next test in the same worker must not inherit it."""
    import os

    before = os.environ.get("OTCA_STARTED_IN")
    yield
    if before is None:
        os.environ.pop("OTCA_STARTED_IN", None)
    else:
        os.environ["OTCA_STARTED_IN"] = before
