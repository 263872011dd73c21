"""Where an app's queues and budgets live when it has several databases (docs/design.md
"Several databases"): their placement as declared, its checks, and the grouping of queues by
database that sync, drain and the worker use. `Placement` is a part of App."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .database import DEFAULT_DATABASE, mask, same_database
from .errors import InvalidOptionsError, InvalidPolicyError
from .types import BudgetSpec, check_database_name


class Placement:
    """App's placement of queues and budgets in its databases.

    >>> from workhorse import App
    >>> app = App("docs", databases={"eu": "postgresql://eu.internal/app"})
    >>> _ = app.queue("eu-mail", database="eu")
    >>> app.database_of("eu-mail")
    'eu'
    """

    # Set by App and AppEnqueuer.
    name: str
    tasks: dict[str, Any]
    queues: dict[str, Any]
    budgets: dict[str, BudgetSpec]
    placement: dict[str, str]
    budget_placement: dict[str, str]
    _databases: dict[str, str] | None

    if TYPE_CHECKING:
        @property
        def database_names(self) -> list[str]: ...  # AppEnqueuer's

        def declared_queues(self) -> list[str]: ...  # App's

        def database_url_of(self, name: str = ...) -> str: ...  # AppEnqueuer's

    def _check_database(self, name: str, what: str) -> None:
        # Checked at declaration when the app's databases are given in code; those named by
        # WORKHORSE_DATABASES are read at first use (check_placement).
        if self._databases is not None and name not in self.database_names:
            raise InvalidPolicyError(
                f"{what} is placed in database {name!r}, which app {self.name!r} does not have "
                f"(its databases: {', '.join(self.database_names)})")

    @contextlib.contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """A declaration refused half-way (InvalidPolicyError, InvalidOptionsError) leaves the
        app as it was: its queues, placements, budgets and tasks (restored in place: others
        hold these dicts)."""
        kept: list[dict[str, Any]] = [self.queues, self.placement, self.budget_placement,
                                      self.budgets, self.tasks]
        before = [dict(each) for each in kept]
        try:
            yield
        except (InvalidPolicyError, InvalidOptionsError):
            for each, was in zip(kept, before, strict=True):
                each.clear()
                each.update(was)
            raise

    def _place(self, queue: str, database: str | None) -> None:
        if database is not None:
            self._placed_in(self.placement, "queue", queue, database)

    def _place_budget(self, budget: str, database: str) -> None:
        self._placed_in(self.budget_placement, "budget", budget, database)

    def _placed_in(self, table: dict[str, str], what: str, name: str, database: str) -> None:
        """`name` (a queue or budget) placed in `database`, or InvalidPolicyError and the
        placement as it was."""
        check_database_name(database, InvalidPolicyError)
        placed = table.get(name)
        if placed is not None and placed != database:
            raise InvalidPolicyError(
                f"{what} {name!r} is placed in database {placed!r} and in {database!r}: a "
                f"{what} lives in exactly one database")
        self._check_database(database, f"{what} {name!r}")
        table[name] = database
        try:
            self._check_budgets()
        except InvalidPolicyError:  # refused: it stays where it was
            if placed is None:
                del table[name]
            else:
                table[name] = placed
            raise

    def database_of(self, queue: str) -> str:
        """The name of the app's database that `queue` lives in: where `app.queue(...,
        database=)` or `@app.task(..., database=)` placed it, else `default`.

        >>> app = App("docs", databases={"eu": "postgresql://eu.internal/app"})
        >>> _ = app.queue("eu-mail", database="eu")
        >>> app.database_of("eu-mail"), app.database_of("mail")
        ('eu', 'default')
        """
        return self.placement.get(queue, DEFAULT_DATABASE)

    def database_of_budget(self, budget: str) -> str | None:
        """The database a budget lives in: where `app.budget(..., database=)` placed it, else
        where the queues of the tasks that name it live; None when the app says nothing of it.

        >>> app = App("docs")
        >>> _ = app.budget("db", max_active=8, database="default")
        >>> app.database_of_budget("db")
        'default'
        """
        placed = self.budget_placement.get(budget)
        if placed is not None:
            return placed
        for task in self.tasks.values():
            if task.budget == budget:
                return self.database_of(task.queue.name)
        return DEFAULT_DATABASE if budget in self.budgets else None

    def _check_budgets(self) -> None:
        """InvalidPolicyError when a budget's queues (those of the tasks that name it) live in
        more than one database, or not in the one the budget is placed in."""
        homes: dict[str, dict[str, str]] = {}
        for name, where in self.budget_placement.items():
            homes.setdefault(name, {})[where] = f"app.budget({name!r}, database={where!r})"
        for task in self.tasks.values():
            if task.budget is not None:
                where = self.database_of(task.queue.name)
                homes.setdefault(task.budget, {}).setdefault(
                    where, f"queue {task.queue.name!r} (task {task.name!r})")
        for name, found in homes.items():
            if len(found) > 1:
                raise InvalidPolicyError(
                    f"budget {name!r} would live in {len(found)} databases: "
                    + "; ".join(f"{where}: {who}" for where, who in sorted(found.items()))
                    + ". A budget lives in one database with every queue that names it")

    def check_budget_placement(self, budget: str, database_name: str) -> None:
        """InvalidOptionsError when a job of a queue in `database_name` names a budget this app
        places in another database (its limit is counted there, and never here).

        >>> App("docs").check_budget_placement("db", "default")
        """
        where = self.database_of_budget(budget)
        if where is not None and where != database_name:
            raise InvalidOptionsError(
                f"budget {budget!r} lives in database {where!r}, and this job's queue in "
                f"{database_name!r}: a budget governs only queues of its own database")

    def check_placement(self) -> None:
        """InvalidPolicyError when a queue or budget is placed in a database the app does not
        have (WORKHORSE_DATABASES read now), or a budget's queues span databases;
        InvalidOptionsError when two names are one database. Run by sync and the worker.

        >>> App("docs").check_placement()
        """
        known = set(self.database_names)
        for what, placed in (("queue", self.placement), ("budget", self.budget_placement)):
            for name, where in placed.items():
                if where not in known:
                    raise InvalidPolicyError(
                        f"{what} {name!r} is placed in database {where!r}, which app "
                        f"{self.name!r} does not have (its databases: "
                        f"{', '.join(self.database_names)}; set them with App(databases=...) "
                        "or WORKHORSE_DATABASES)")
        self._check_budgets()
        if len(known) > 1:
            urls = {name: self.database_url_of(name) for name in self.database_names}
            for first in urls:
                for second in urls:
                    if first < second and same_database(urls[first], urls[second]):
                        raise InvalidOptionsError(
                            f"app {self.name!r} names one database twice: {first!r} and "
                            f"{second!r} are both {mask(urls[first])} (each name's sync would "
                            "prune the other's policies)")

    def queues_by_database(self, queues: Sequence[str] | None = None) -> dict[str, list[str]]:
        """The app's queues (or `queues`) grouped by the database they live in, the default
        database first, in declaration order.

        >>> app = App("docs", databases={"eu": "postgresql://eu.internal/app"})
        >>> _ = app.queue("mail"); _ = app.queue("eu-mail", database="eu")
        >>> app.queues_by_database()
        {'default': ['mail'], 'eu': ['eu-mail']}
        """
        grouped: dict[str, list[str]] = {}
        for queue in (self.declared_queues() if queues is None else queues):
            grouped.setdefault(self.database_of(queue), []).append(queue)
        order = {name: index for index, name in enumerate(self.database_names)}
        return dict(sorted(grouped.items(), key=lambda item: order.get(item[0], len(order))))
