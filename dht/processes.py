"""Child processes, as the ring's tools start them (`ring up`, experiments, studies, tests): conditions
polled with a deadline instead of sleeps, starts that a Ctrl-C cannot orphan, and stops that always
escalate from SIGTERM to SIGKILL. Below both chordpub/ (the CLI's launcher) and topologies/ (experiments
on Mininet), which use them alike."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.05,
             what: str = "condition") -> object:
    """Poll `predicate` until it returns something truthy; raise TimeoutError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout:g}s")
        time.sleep(interval)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block ends, then raise it.

    A KeyboardInterrupt that lands inside `subprocess.Popen`, after the fork, loses the child: Popen
    never returns it, so nobody can stop it. Starting a child and recording it inside this block
    means whatever stops "everything started" on an interrupt really sees everything. Off the main
    thread (where Python delivers no signals) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[object] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt


PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """A `preexec_fn`: the child gets a process group of its own, and `signum` when its parent dies
    (Linux's PR_SET_PDEATHSIG, kept across exec), whatever kills the parent. Only the child gets it:
    a shell that forks its command passes it on itself (`group_guard`)."""
    import ctypes
    import os

    os.setpgid(0, 0)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() == 1:  # the parent died before the line above ran
        os._exit(1)


def die_with_parent_group() -> None:
    """`die_with_parent` for a `group_guard` shell: SIGTERM, which its trap turns into the group's SIGKILL."""
    die_with_parent(signal.SIGTERM)


def group_guard(command: str) -> list[str]:
    """argv of `sh -c command` that dies with its whole process group when its parent dies (with
    `die_with_parent_group`). PR_SET_PDEATHSIG reaches the shell alone, and a shell forks what it
    runs (`a; b`, pipes, most commands under dash): so the command runs in the background, stdin kept,
    while the shell waits, and the shell's SIGTERM trap kills the group (itself last). The command is
    an argument, parsed on its own by `eval`: whatever it holds, it cannot end the guard's own script."""
    return ["/bin/sh", "-c", 'trap "kill -9 0" TERM; exec 3<&0; eval "$1" <&3 3<&- & wait $!', "chordpub-guard",
            command]


def stop_processes(procs: Iterable[subprocess.Popen], grace: float = 5.0) -> None:
    """SIGTERM every process, wait up to `grace` seconds, then SIGKILL what is left."""
    procs = [p for p in procs if p is not None]
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
