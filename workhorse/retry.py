"""Retry backoff: exponential with "equal" jitter (a draw from [delay/2, delay]), capped."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InvalidOptionsError


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """Delay before retry number `attempt` (1 = the first retry): `base * factor**(attempt-1)`,
    capped at `cap`, then drawn uniformly from [delay/2, delay] when `jitter` is on. (0.2.0
    called it `Backoff`, a name that now means back-pressure from a handler; `Backoff(base=...)`
    still makes one of these, with a DeprecationWarning.)

    >>> ExponentialBackoff(base=1, factor=2, cap=10, jitter=False).delay(3)
    4.0
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.cap < 0:
            raise InvalidOptionsError(
                f"ExponentialBackoff needs base >= 0, factor >= 1 and cap >= 0, got "
                f"base={self.base!r}, "
                f"factor={self.factor!r}, cap={self.cap!r}"
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt`.

        >>> ExponentialBackoff(base=2, factor=3, jitter=False).delay(2)
        6.0
        """
        exponent = max(attempt - 1, 0)
        raw = self.cap if exponent > 64 else min(self.cap, self.base * self.factor**exponent)
        if self.jitter:
            return random.uniform(raw / 2, raw)
        return float(raw)


RetryBackoff = ExponentialBackoff | float | int | Callable[[int], float]


def backoff_delay(policy: RetryBackoff | None, attempt: int) -> float:
    """Seconds to wait before retrying after failed attempt number `attempt`."""
    if policy is None:
        policy = ExponentialBackoff()
    if isinstance(policy, ExponentialBackoff):
        return policy.delay(attempt)
    if isinstance(policy, int | float):
        return float(policy)
    return max(0.0, float(policy(attempt)))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a durable step retries inside one run before its error reaches the handler
    (docs/design.md "Durable execution"): up to `max_attempts` calls in all, waiting
    `backoff_delay(backoff, n)` after failed call n, for the errors in `retry_on`.

    >>> RetryPolicy(max_attempts=3, backoff=0.5).max_attempts
    3
    """

    max_attempts: int = 3
    backoff: RetryBackoff = 1.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if (isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int)
                or not 1 <= self.max_attempts <= 1000):
            raise InvalidOptionsError(
                f"RetryPolicy.max_attempts must be an int from 1 to 1000, got "
                f"{self.max_attempts!r}")
        retry_on = self.retry_on
        if not isinstance(retry_on, tuple) or not all(
                isinstance(kind, type) and issubclass(kind, BaseException) for kind in retry_on):
            raise InvalidOptionsError(
                f"RetryPolicy.retry_on must be a tuple of exception types, got {retry_on!r}")
        backoff = self.backoff
        if isinstance(backoff, bool) or not (
                isinstance(backoff, ExponentialBackoff | int | float) or callable(backoff)):
            raise InvalidOptionsError(
                f"RetryPolicy.backoff must be seconds, an ExponentialBackoff or a callable, got "
                f"{backoff!r}")
        if isinstance(backoff, int | float) and not 0 <= backoff <= 3600:
            raise InvalidOptionsError(
                f"RetryPolicy.backoff must be 0 to 3600 seconds, got {backoff!r}")
