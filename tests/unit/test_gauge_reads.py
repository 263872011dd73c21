"""A supervisor reads health for the concurrency gauges only once a metrics SDK collects them
(docs/architecture.md "Background reads"): with no SDK configured nobody sees the values, and the
read is a fleet-wide query every few seconds per supervisor. Run in subprocesses: the SDK's global
meter provider can be set once per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json, sys
    from workhorse import _ops, telemetry
    from workhorse.types import QueueHealth
    from workhorse.worker import _registry

    reads = []
    _ops.execute = lambda conn, op: reads.append(op) or QueueHealth(policies=[], depth={})
    _ops.health = lambda: "health"
    registry = _registry.Registry(app="a", host="h", pid=1, slots=1, queues=["q"],
                                  stats=dict)
    if sys.argv[1] == "sdk":
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    registry._publish_health(None)  # before any collection
    before = len(reads)
    if sys.argv[1] == "sdk":
        reader.get_metrics_data()
    registry._publish_health(None)
    print(json.dumps({"before": before, "after": len(reads) - before,
                      "collected": telemetry.gauges_collected()}))
''')


def _run(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_no_sdk_no_health_read() -> None:
    assert _run("none") == {"before": 0, "after": 0, "collected": False}


def test_health_is_read_once_an_sdk_collects_the_gauges() -> None:
    assert _run("sdk") == {"before": 0, "after": 1, "collected": True}
