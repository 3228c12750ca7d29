# SPDX-License-Identifier: MIT
"""Ctrl-C during a blocking call: the wait hook (``comm_set_wait_hook``) of every Comm.

Python runs a signal's handler in the main thread, between two bytecodes; a thread
blocked in a C call runs none.  So every communicator gets a wait hook, which libarcomm
runs from the waiting thread about every ``PERIOD_US`` while a call waits for its peers
(never on a call whose peers are all there):

* In the main thread the hook runs Python code, so the pending handlers run there.  An
  exception a handler raises (KeyboardInterrupt from SIGINT's default handler, whatever
  a handler of the program raises) is caught, the hook returns 1, which stops the call
  as comm_abort stops it (this rank COMM_ERR_ABORTED, every peer COMM_ERR_PEER at once),
  and the call raises that exception once the C call returned.
* Signals reach the main thread only, so a thread rank's call learns of Ctrl-C through
  SIGINT's handler: the first communicator (or id) made in the main thread replaces
  SIGINT's default handler with one that counts the signal, then raises
  KeyboardInterrupt exactly as the default does.  A call whose hook sees that count
  change since the call began stops the same way and raises arcomm.Error
  COMM_ERR_ABORTED saying so.  A program's own SIGINT handler is left alone (its thread
  ranks then wait on).

The hook is a generator's ``__next__``: Python checks for pending signals when a frame
starts and when a generator resumes after a ``yield``.  A plain function would run the
handlers as its frame starts, outside any ``try`` of its own, and ctypes would swallow
the exception; a generator resumes inside its ``try``.  ``__next__`` takes no argument,
so the callback's prototype is ``int (void)``: libarcomm calls it as
``int (*)(comm_t *, void *)``, whose two arguments travel in registers that the callee
ignores on every ABI Python runs on for Linux (the caller owns the argument area).
"""
from __future__ import annotations

import ctypes
import signal
import threading

#: How often the hook runs while a call waits (microseconds): SIGINT interrupts a call
#: within about this long (plus the time to wake the waiter).
PERIOD_US = 20000

_HOOK = ctypes.CFUNCTYPE(ctypes.c_int)


class _Count:
    """How many SIGINTs arcomm's handler has seen."""

    sigint = 0


count = _Count()
_installed = False
_main_ident = threading.main_thread().ident


def _on_sigint(signum, frame):  # noqa: ANN001 - a signal handler
    """SIGINT's handler while arcomm's is installed: counted, then what Python's own
    default does (raise KeyboardInterrupt)."""
    count.sigint += 1
    signal.default_int_handler(signum, frame)


def install_sigint() -> None:
    """From the main thread, where SIGINT still has Python's default handler: arcomm's
    (see the module's docstring).  Elsewhere nothing happens."""
    global _installed
    if _installed or threading.get_ident() != _main_ident:
        return
    _installed = True
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):  # not the main interpreter, or no signals here
        pass


class CallState:
    """One Comm's hook state: what the hook saw during the call in flight."""

    __slots__ = ("exc", "sigint0", "why", "runs")

    def __init__(self) -> None:
        self.exc: BaseException | None = None  # what a handler raised (main thread)
        self.sigint0 = 0  # count.sigint when the call began
        self.why = ""  # why the hook stopped a thread rank's call
        self.runs = 0  # how often the hook ran (a call is waiting in C once it grows)


def _waiter(state: CallState):
    """The hook's body: yields 0 to let the call wait on, 1 to stop it."""
    stop = 0
    while True:
        try:
            # Pending signal handlers run as the generator resumes here, inside the try.
            yield stop
            stop = 0
            state.runs += 1
            me = threading.get_ident()
            if me == _main_ident:
                continue
            if count.sigint != state.sigint0:
                state.why = "SIGINT (Ctrl-C) reached the main thread"
                stop = 1
        except GeneratorExit:
            raise
        except BaseException as e:  # noqa: BLE001 - raised again by the call
            if state.exc is None:
                state.exc = e
            stop = 1


def make_hook(state: CallState) -> tuple:
    """(the C function pointer, what keeps it alive)."""
    gen = _waiter(state)
    next(gen)  # up to its first yield
    cb = _HOOK(gen.__next__)
    return ctypes.cast(cb, ctypes.c_void_p), (cb, gen)
