"""Per-key limits as data (docs/design.md "Per-key limits"): `keys set|clear|list QUEUE ...`.

An operator's change: `set` upserts the keys named (or the default) and leaves the others alone,
`clear` deletes keys' rows (or, with --all, the queue's whole set), `list` reads them. The limits
belong to the namespace that owns the queue's policy, which each write says: that namespace's
next `workhorse sync` makes them what its app declares again (a queue its app declares key
limits for: always; any other of its queues: unless --no-prune)."""

from __future__ import annotations

from typing import Any

import click
import psycopg

from .. import _ops
from .._text import literal, visible
from ..errors import InvalidPolicyError
from ..queue import Queue
from ..types import KeyLimit, KeyLimitSet, RateLimit, SyncReport
from ._base import console, error_console, handle_errors, main, print_json
from ._databases import Reading, connect_change, database_option
from ._render import DataTable, limit_text

# `keys list` prints a table up to this many keys, and plain aligned columns beyond.
TABLE_ROWS = 1000


def _rate(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(RateLimit.parse(value, "rate_limit"))
    except InvalidPolicyError as exc:
        raise click.BadParameter(str(exc), param_hint="--rate-limit") from None


def _owner_note(conn: psycopg.Connection[Any], queue: str, as_json: bool) -> None:
    """Whose the limits are (the namespace owning the queue's policy), and what its next sync
    does to an operator's change. With --json on stderr, leaving stdout's JSON whole."""
    owner = _ops.execute(conn, _ops.queue_owners([queue])).get(queue)
    if owner is None:
        return
    line = (f"namespace {owner} owns queue {queue}: its next sync makes the queue's key limits "
            "what its app declares (none, unless --no-prune, if it declares none there)")
    target = error_console if as_json else console
    target.print(literal(line, "dim" if as_json else ""), soft_wrap=True)


def _fairness_note(conn: psycopg.Connection[Any], queue: str, as_json: bool) -> None:
    """A weight shares only a fair queue (fairness="key"): said when the queue is not one."""
    policy = next((p for p in Queue(conn).list_concurrency_policies() if p.queue == queue), None)
    if policy is not None and policy.fairness != "key":
        target = error_console if as_json else console
        target.print(literal(f"note: queue {queue} is not fair (fairness={policy.fairness}): a "
                             "weight applies only on a queue with fairness=\"key\"", "yellow"),
                     soft_wrap=True)


def _names(keys: list[str]) -> str:
    return ", ".join(repr(key) for key in keys)


@main.group()
def keys() -> None:
    """Per-key limits of a queue as data (max_active, weight and rate per key, and a default for
    the keys not listed): `set`, `clear` and `list`. A key's limits replace the policy's
    per-key ones for that key; the queue needs a policy."""


@keys.command("set")
@click.argument("queue")
@click.argument("keys_", metavar="[KEY]...", nargs=-1)
@click.option("--default", "is_default", is_flag=True,
              help="Set the default for the keys not listed (instead of KEYs).")
@click.option("--max-active", type=click.IntRange(1, 1_000_000), default=None,
              help="Units active at once per key (replaces max_active_per_key).")
@click.option("--weight", type=click.IntRange(1, 1000), default=None,
              help="The key's weight on a fair queue (its jobs of weight 1).")
@click.option("--rate-limit", default=None, metavar="N/P",
              help="Starts per key, e.g. 100/m, 5/10s (replaces rate_limit_per_key).")
@click.option("--json", "as_json", is_flag=True, help="Print the SyncReport (keys; '' is the "
              "set and its default) as JSON.")
@database_option(change=True)
@click.pass_context
@handle_errors
def keys_set(ctx: click.Context, queue: str, keys_: tuple[str, ...], is_default: bool,
             max_active: int | None, weight: int | None, rate_limit: str | None,
             as_json: bool) -> None:
    """Give each KEY of QUEUE exactly these limits (a limit not given is the default's, else
    the policy's), or with --default set the default; other keys keep theirs. In force from
    the next claim."""
    rate = _rate(rate_limit)
    if max_active is None and weight is None and rate is None:
        raise click.UsageError("give at least one of --max-active, --weight, --rate-limit")
    if is_default and keys_:
        raise click.UsageError("give KEYs or --default, not both")
    if not is_default and not keys_:
        raise click.UsageError("give the KEYs to set, or --default")
    limit = KeyLimit(max_active=max_active, weight=weight, rate_limit=rate)
    wanted = dict.fromkeys(keys_, limit)
    with connect_change(ctx) as conn:
        report = Queue(conn).set_key_limits(None, queue, wanted,
                                            default=limit if is_default else None, prune=False)
        if as_json:
            print_json(report)
        elif is_default:
            changed = "created" if "" in report.created else (
                "updated" if "" in report.updated else "unchanged")
            console.print(literal(f"queue {queue}: default {changed} ({_limit_text(limit)})"),
                          soft_wrap=True)
        else:
            _print_set(queue, report, limit)
        if weight is not None:
            _fairness_note(conn, queue, as_json)
        _owner_note(conn, queue, as_json)


def _print_set(queue: str, report: SyncReport, limit: KeyLimit) -> None:
    if "" in report.created:
        console.print(literal(f"queue {queue}: its first key limits (no default: the "
                              "policy's per-key limits for the other keys)"), soft_wrap=True)
    for action in ("created", "updated", "unchanged"):
        found = [key for key in getattr(report, action) if key]
        if found:
            console.print(literal(f"{action} {len(found)} key(s) of queue {queue} "
                                  f"({_limit_text(limit)}): {_names(found)}"), soft_wrap=True)


def _limit_text(limit: KeyLimit | None) -> str:
    if limit is None:
        return "-"
    parts = [f"{name} {value}" for name, value in (
        ("max_active", limit.max_active), ("weight", limit.weight),
        ("rate_limit", limit.rate_limit)) if value is not None]
    return ", ".join(parts)


@keys.command("clear")
@click.argument("queue")
@click.argument("keys_", metavar="[KEY]...", nargs=-1)
@click.option("--all", "clear_all", is_flag=True,
              help="Delete the queue's whole set: every key's limits and the default.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the SyncReport (pruned: the keys deleted; '' is the set) as JSON.")
@database_option(change=True)
@click.pass_context
@handle_errors
def keys_clear(ctx: click.Context, queue: str, keys_: tuple[str, ...], clear_all: bool,
               as_json: bool) -> None:
    """Delete the limits of each KEY of QUEUE (the default, else the policy's, apply to it
    from the next claim), or with --all the queue's whole set. Exit 0 also when a key had
    none."""
    if clear_all and keys_:
        raise click.UsageError("give KEYs or --all, not both")
    if not clear_all and not keys_:
        raise click.UsageError("give the KEYs to clear, or --all")
    wanted = None if clear_all else list(dict.fromkeys(keys_))
    with connect_change(ctx) as conn:
        report = Queue(conn).clear_key_limits(queue, wanted)
        if as_json:
            print_json(report)
        else:
            cleared = [key for key in report.pruned if key]
            if wanted is None:
                console.print(literal(
                    f"queue {queue}: " + (f"cleared its key limits (the set, its default "
                                          f"included, and {len(cleared)} key(s))"
                                          if "" in report.pruned else "had no key limits")),
                    soft_wrap=True)
            else:
                if cleared:
                    console.print(literal(f"cleared {len(cleared)} key(s) of queue {queue}: "
                                          f"{_names(cleared)}"), soft_wrap=True)
                missing = [key for key in wanted if key not in report.pruned]
                if missing:
                    console.print(literal(f"no limits of their own in queue {queue}: "
                                          f"{_names(missing)}"), soft_wrap=True)
        _owner_note(conn, queue, as_json)


@keys.command("list")
@click.argument("queue")
@click.option("--key", default=None, help="Only this key's row (and the default).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the KeyLimitSet (null when the queue has none) as JSON; with several "
                   'databases, an object {"<database>": KeyLimitSet or null, ...}.')
@database_option()
@click.pass_context
@handle_errors
def keys_list(ctx: click.Context, queue: str, key: str | None, as_json: bool) -> None:
    """QUEUE's key limits: the default for the keys not listed, and each key's own, in key
    order.

    With several databases (WORKHORSE_DATABASES) and no --database, every database's (a queue
    lives in one: the others have none), the keys in one table led by a `database` column."""
    reading = Reading(ctx)
    found = reading.each(lambda conn: Queue(conn).key_limits(queue, key=key))
    if as_json:
        print_json({name: limits for name, limits in found} if reading.several
                   else found[0][1])
        reading.finish()
        return
    sets = [(reading.name(name), limits) for name, limits in found if limits is not None]
    if not sets:
        anywhere = " in any database" if reading.several else ""
        console.print(literal(f"queue {queue} has no key limits{anywhere} (its policy's per-key "
                              "limits apply to every key)"), soft_wrap=True)
        reading.finish()
        return
    _print_list(sets, key)
    reading.finish()


def _print_list(sets: list[tuple[str | None, KeyLimitSet]], key: str | None) -> None:
    """Each set's default (a line each), then every set's keys in one table, each led by its
    database when some set names one."""
    several = any(name is not None for name, _ in sets)
    rows: list[tuple[str, ...]] = []
    for name, found in sets:
        default = (_limit_text(found.default) if found.default is not None
                   else "none (the policy's per-key limits)")
        where = f", database {name}" if name is not None else ""
        console.print(literal(f"queue {found.queue} (namespace {found.namespace}{where}): "
                              f"default {default}; "
                              f"updated {found.updated_at.isoformat(timespec='seconds')}"),
                      soft_wrap=True)
        if key is not None and key not in found.limits:
            console.print(literal(f"key {key!r} has no limits of its own (the default applies)"),
                          soft_wrap=True)
            continue
        if not found.limits:
            console.print("no key has limits of its own")
            continue
        lead = (name or "-",) if several else ()
        rows += [(*lead, key_name, limit_text(limit.max_active), limit_text(limit.weight),
                  limit.rate_limit or "-") for key_name, limit in found.limits.items()]
    if not rows:
        return
    header = (*(("database",) if several else ()), "key", "max_active", "weight", "rate_limit")
    # The key and the database are text, left; the limits numbers, right; rate_limit last.
    numbers = {"max_active", "weight"}
    if len(rows) > TABLE_ROWS:
        # Plain aligned columns: a rich table of 100,000 rows takes half a minute to lay out.
        cells = [header, *(tuple(visible(cell) if column in ("database", "key") else cell
                                 for column, cell in zip(header, row, strict=True))
                           for row in rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
        click.echo("\n".join(
            "  ".join([*(f"{cell:>{width}}" if column in numbers else f"{cell:<{width}}"
                         for column, cell, width in zip(header[:-1], row[:-1], widths,
                                                        strict=False)), row[-1]])
            for row in cells))
        return
    table = DataTable(title=f"key limits of {sets[0][1].queue}")
    for column in header:
        table.add_column(column, justify="right" if column in numbers else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)
