"""Starting children without losing one to a Ctrl-C (dht.processes.interrupts_deferred)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from dht.processes import interrupts_deferred, stop_processes


def test_a_ctrl_c_while_a_child_starts_is_raised_once_the_child_is_recorded():
    # Python's own Ctrl-C handler, whatever an earlier test of this worker left in place
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGINT)
    children: list[subprocess.Popen] = []
    recorded: list[subprocess.Popen] = []
    try:
        with pytest.raises(KeyboardInterrupt), interrupts_deferred():
            children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                                             stdin=subprocess.DEVNULL, start_new_session=True))
            # lands here, between the fork and the bookkeeping: raised in this thread, so delivered now (a
            # kill() of the process may be taken by another thread, and run late, after the block)
            signal.raise_signal(signal.SIGINT)
            recorded.append(children[-1])
        assert recorded == children, "the interrupt was raised before the child was recorded"
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        signal.signal(signal.SIGINT, outer)
        stop_processes(children, grace=1)


def test_without_an_interrupt_the_block_runs_as_usual():
    before = signal.getsignal(signal.SIGINT)
    with interrupts_deferred():
        value = 1
    assert value == 1 and signal.getsignal(signal.SIGINT) is before
