"""`python -m workhorse.cli`, as `workhorse` (and `python -m workhorse`)."""

from . import main

main(prog_name="workhorse")
