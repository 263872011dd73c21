"""`manage.py workhorse [global options] VERB ...`: the `workhorse` command with Django set up.

Its arguments pass through unchanged (`manage.py workhorse --database-url URL jobs list`,
`manage.py workhorse worker --slots 2`); the verbs that take APP (`worker`, `sync`) take it from
the setting `WORKHORSE_APP` when it is omitted. Every verb uses Django's database (the rule of
`workhorse.contrib.django`) unless `--database-url` is given.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError

# The verbs whose first argument is APP.
APP_VERBS = ("worker", "sync")


def run(args: Sequence[str], prog_name: str, standalone: bool = True) -> Any:
    """The `workhorse` click command on `args`, APP defaulting to the setting WORKHORSE_APP."""
    from django.conf import settings

    from workhorse.cli import main

    default_app = getattr(settings, "WORKHORSE_APP", None)
    default_map = {verb: {"app_reference": default_app} for verb in APP_VERBS} if default_app \
        else {}
    return main.main(args=list(args), prog_name=prog_name, default_map=default_map,
                     standalone_mode=standalone)


def without_django_options(args: Sequence[str]) -> list[str]:
    """`args` less Django's own `--settings` and `--pythonpath` (and their values)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--settings", "--pythonpath"):
            skip = True
        elif not arg.startswith(("--settings=", "--pythonpath=")):
            kept.append(arg)
    return kept


class Command(BaseCommand):
    help = ("The workhorse command with Django set up: manage.py workhorse [global options] "
            "VERB ... (APP from the setting WORKHORSE_APP when omitted; try --help).")

    def run_from_argv(self, argv: list[str]) -> None:
        # Django's option parser would take workhorse's own flags (-v, --help): everything after
        # the command's name goes to the workhorse command as it was typed, but for Django's
        # --settings and --pythonpath, which manage.py has already applied.
        run(without_django_options(argv[2:]),
            prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER,
                            help="workhorse's own arguments: [global options] VERB ...")

    def handle(self, *args: str, **options: Any) -> None:
        # call_command("workhorse", "jobs", "list"): the same, without leaving the process.
        try:
            run(args, prog_name="manage.py workhorse", standalone=False)
        except click.ClickException as exc:
            raise CommandError(exc.format_message()) from exc
