"""How long to wait before trying the database again after an error."""

from __future__ import annotations


class Reconnect:
    """0.5 s after the first failure, doubling up to 10 s; back to 0.5 s after a success.

    >>> r = Reconnect(); [r.failed() for _ in range(6)]
    [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    """

    FIRST = 0.5
    CAP = 10.0

    def __init__(self) -> None:
        self.delay = self.FIRST

    def failed(self) -> float:
        """The wait before the next try; the one after it doubles."""
        delay = self.delay
        self.delay = min(delay * 2, self.CAP)
        return delay

    def succeeded(self) -> None:
        self.delay = self.FIRST
