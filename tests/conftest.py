"""Loaded by every test session.

Under pytest-xdist a worker writes its terminal summary after it has told the controller it is
done, and the controller may then interrupt it (a KeyboardInterrupt inside pytest's hook teardown,
printed as a PluggyTeardownRaisedWarning). Hypothesis' pytest plugin imports ``hypothesis`` in that
summary, which is slow where the worker ran no Hypothesis test; importing it here, at start-up,
leaves the summary nothing slow to do.
"""
import hypothesis  # noqa: F401
