# SPDX-License-Identifier: MIT
"""arcomm.Error and the status names of the C API."""
from __future__ import annotations

from . import _lib

#: comm_status_t values -> names.
STATUS_NAMES = {
    0: "COMM_OK",
    -1: "COMM_ERR_INVALID",
    -2: "COMM_ERR_NOMEM",
    -3: "COMM_ERR_UNSUPPORTED",
    -4: "COMM_ERR_SYSTEM",
    -5: "COMM_ERR_TIMEOUT",
    -6: "COMM_ERR_PEER",
    -7: "COMM_ERR_MISMATCH",
    -8: "COMM_ERR_ABORTED",
}
INVALID = -1
ABORTED = -8


class Error(Exception):
    """A call of the C API returned an error.

    ``status`` is the ``comm_status_t`` name ("COMM_ERR_MISMATCH"), ``code`` its value,
    ``message`` what ``comm_last_error`` said (or, for what the package itself refused,
    its own message), ``call`` the collective or function.
    """

    def __init__(self, code: int, message: str, call: str = "") -> None:
        self.code = code
        self.status = STATUS_NAMES.get(code, f"COMM_STATUS_{code}")
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.status}: {message}" if message else f"{where}{self.status}")


def last_error(handle: int | None) -> str:
    """comm_last_error(handle), else comm_last_error(NULL) (this thread's init error)."""
    lib = _lib.lib()
    msg = lib.comm_last_error(handle)
    if not msg and handle is not None:
        msg = lib.comm_last_error(None)
    return (msg or b"").decode(errors="replace")


def raise_status(code: int, handle: int | None, call: str) -> None:
    raise Error(code, last_error(handle), call)
