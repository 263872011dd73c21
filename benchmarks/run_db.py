"""Run the database benchmarks, enqueue then claim, with one command.

    .venv/bin/python benchmarks/run_db.py [--database-url URL] [--quick] [--format plain]

The server is chosen once, as the product chooses it (--database-url, then
$WORKHORSE_DATABASE_URL, then the embedded server), and both benchmarks run on it in their own
scratch databases. `--quick` runs both in their quick modes (bench_claim: sizes capped at 100k;
bench_enqueue: 2,000 jobs for the one-call-per-job variants). Without it, bench_claim runs the
full sizes (1M rows), rate-limit cases included; benchmarks/README.md has the run times seen.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
import bench_claim
import bench_enqueue


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--format", choices=("rich", "plain"), default=None)
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--skip", choices=("enqueue", "claim"), default=None, help="leave one of the two out"
    )
    args = parser.parse_args(argv)

    url, source = c.resolve_server_url(args.database_url)
    print(f"server: {c.describe_url(url)} ({source})", flush=True)
    common = [
        *(["--format", args.format] if args.format else []),
        *(["--keep-db"] if args.keep_db else []),
    ]
    started = time.perf_counter()
    if args.skip != "enqueue":
        bench_enqueue.main(
            [*common, *(["--quick"] if args.quick else [])], server_url=url, source=source
        )
    if args.skip != "claim":
        bench_claim.main(
            [*common, *(["--quick"] if args.quick else [])], server_url=url, source=source
        )
    print(f"\nrun_db finished in {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
