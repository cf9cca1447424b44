"""What an upstream GPU trainer needs to run on this CPU machine, and nothing more: a gloo world,
import stubs, and reward models or services that cannot be downloaded, each replaced at its smallest
boundary (the smoke runs and the launch rehearsal install them; a training run never does)."""
