"""The per-key limit methods of `Queue` and `AsyncQueue` (docs/design.md "Per-key limits"): a
queue's limits per key as desired state, an operator's removal of them, and reading them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import _ops
from .types import KeyLimit, KeyLimitSet, SyncReport


class KeyLimitMethods:
    """`Queue`'s per-key limit methods (its `_run` runs each operation on its connection)."""

    _run: Any

    def set_key_limits(
        self,
        namespace: str | None,
        queue: str,
        limits: Mapping[Any, KeyLimit],
        default: KeyLimit | None = None,
        prune: bool = True,
    ) -> SyncReport:
        """Make `queue`'s per-key limits equal `limits` (`{key: KeyLimit}`) and `default` (for
        the keys not listed; None: the policy's per-key limits). The queue needs a policy, owned
        by `namespace` (None: whichever owns it). With `prune=False`, other keys' rows stay, and
        the default too unless one is given. In force from the next claim. Reports keys ('' is
        the set itself).

        >>> q.set_key_limits("billing", "api", {"acme": KeyLimit(max_active=10)},  # doctest: +SKIP
        ...                  default=KeyLimit(max_active=1))
        SyncReport(created=['', 'acme'], updated=[], pruned=[], unchanged=[], ...)
        """
        return self._run(_ops.set_key_limits(namespace, queue, limits, default, prune),
                         transaction=True)

    def clear_key_limits(
        self, queue: str, keys: Iterable[Any] | None = None, *, namespace: str | None = None
    ) -> SyncReport:
        """Delete the limits of `keys` of `queue` (None: every key's and the default); reports
        them as pruned.

        >>> q.clear_key_limits("api", ["acme"]).pruned                 # doctest: +SKIP
        ['acme']
        """
        return self._run(_ops.clear_key_limits(namespace, queue, keys), transaction=True)

    def key_limits(self, queue: str, *, key: str | None = None) -> KeyLimitSet | None:
        """`queue`'s stored key limits (None when it has none), or only `key`'s row.

        >>> q.key_limits("api").limits["acme"].max_active             # doctest: +SKIP
        10
        """
        return self._run(_ops.key_limits(queue, key=key))


class AsyncKeyLimitMethods:
    """`AsyncQueue`'s per-key limit methods."""

    _run: Any

    async def set_key_limits(
        self,
        namespace: str | None,
        queue: str,
        limits: Mapping[Any, KeyLimit],
        default: KeyLimit | None = None,
        prune: bool = True,
    ) -> SyncReport:
        """`Queue.set_key_limits`, awaitable.

        >>> limits = {"acme": KeyLimit(max_active=10)}
        >>> await aq.set_key_limits("billing", "api", limits)      # doctest: +SKIP
        SyncReport(created=['', 'acme'], ...)
        """
        return await self._run(_ops.set_key_limits(namespace, queue, limits, default, prune),
                               transaction=True)

    async def clear_key_limits(
        self, queue: str, keys: Iterable[Any] | None = None, *, namespace: str | None = None
    ) -> SyncReport:
        """`Queue.clear_key_limits`, awaitable.

        >>> (await aq.clear_key_limits("api")).pruned                # doctest: +SKIP
        ['', 'acme']
        """
        return await self._run(_ops.clear_key_limits(namespace, queue, keys), transaction=True)

    async def key_limits(self, queue: str, *, key: str | None = None) -> KeyLimitSet | None:
        """`Queue.key_limits`, awaitable.

        >>> (await aq.key_limits("api")).default                     # doctest: +SKIP
        KeyLimit(max_active=1, weight=None, rate_limit=None)
        """
        return await self._run(_ops.key_limits(queue, key=key))
