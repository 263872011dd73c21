"""The gauge `workhorse.queue.reason` (docs/design.md "Reason codes"): one observation per queue
and code present, valued by its count, with the attributes `workhorse.queue` and
`workhorse.reason` only. Run in a subprocess: the SDK's global meter provider can be set once per
process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    from workhorse import Reason, telemetry
    from workhorse.types import QueueHealth

    def points():
        found = []
        data = reader.get_metrics_data()  # None when no instrument has a point
        for resource in (data.resource_metrics if data is not None else []):
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "workhorse.queue.reason":
                        found.extend([dict(p.attributes), p.value]
                                     for p in metric.data.data_points)
        return sorted(found, key=lambda pair: sorted(pair[0].items()))

    telemetry.publish_health(QueueHealth(policies=[], depth={}, reasons=[
        Reason("at_limit", 40, "5 of max_active=5 in use", "mail"),
        Reason("paused", 0, "paused", "mail"),
        Reason("no_worker", 3, "none", "exports"),
    ]))
    first = points()
    telemetry.publish_health(QueueHealth(policies=[], depth={}, reasons=[]))
    print(json.dumps({"first": first, "after": points()}))
''')


def test_one_point_per_queue_and_code_present() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["first"] == [
        [{"workhorse.queue": "exports", "workhorse.reason": "no_worker"}, 3],
        [{"workhorse.queue": "mail", "workhorse.reason": "at_limit"}, 40],
        [{"workhorse.queue": "mail", "workhorse.reason": "paused"}, 0],
    ]
    assert found["after"] == []  # a code that went away is not observed any more
