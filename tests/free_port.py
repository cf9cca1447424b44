"""A TCP port no process listens on now, for the rendezvous of a torchrun or accelerate launch a
test starts. A fixed or pid-derived port collides when two suites (or two pytest-xdist workers)
run side by side on one machine; the kernel's choice of a free one does not."""
import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
