"""What the worker's per-job log lines cost: one batch of succeeded jobs formatted and written
at once (`workhorse.worker._logs.succeeded`, as a slot does after each flush), per job, for
`--log-format text` and `json` at `--log-level info`, and at `warning` (nothing written).

    .venv/bin/python benchmarks/bench_logs.py [--batch 64] [--rounds 200]

No database: the cost is the slot's Python, to be set against the worker CPU of a no-op job that
`bench_cpu.py` measures. stderr goes to /dev/null while timing. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from workhorse.worker import _logs


def per_job(level: str, fmt: str, lines: list[tuple[str, int, str, int, float]],
            rounds: int) -> float:
    """Microseconds a job, the best of 5 repeats of `rounds` batches."""
    _logs.configure(level, fmt)
    real = sys.stderr
    with open("/dev/null", "w") as sink:
        sys.stderr = sink
        try:
            best = min(timeit.repeat(lambda: _logs.succeeded(lines), number=rounds, repeat=5))
        finally:
            sys.stderr = real
    return best / rounds / len(lines) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--format", choices=("rich", "plain"), default=None,
                        help="table style (default: rich on a terminal, plain Markdown otherwise)")
    args = parser.parse_args()
    lines = [(f"billing.task{i % 4}", 10**9 + i, f"queue-{i % 3}", 1 + i % 3, i * 1.234e-4)
             for i in range(args.batch)]
    table = c.Table(f"log lines, batches of {args.batch} succeeded jobs",
                    ["--log-level", "--log-format", "µs a job"])
    for level, fmt in (("info", "text"), ("info", "json"), ("warning", "text")):
        table.add(level, fmt, f"{per_job(level, fmt, lines, args.rounds):.2f}")
    c.Printer(args.format).table(table)


if __name__ == "__main__":
    main()
