"""The budget gauges (docs/design.md "OpenTelemetry instrument names"):
`workhorse.budget.concurrency.limit|active`, whose one attribute is `workhorse.budget`, fed by the
published health snapshot. Run in a subprocess: the SDK's global meter provider can be set once per
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

    from workhorse import telemetry
    from workhorse.types import BudgetHealth, QueueHealth

    telemetry.publish_health(QueueHealth(policies=[], depth={}, budgets=[
        BudgetHealth("openai", "ai", 50, "3000/m", 100, None, 7, 0, ["summaries"]),
        BudgetHealth("ghost", None, None, None, None, None, 2, 0, ["other"]),
    ]))
    found = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name.startswith("workhorse.budget."):
                    found[metric.name] = sorted(
                        ([dict(p.attributes), p.value] for p in metric.data.data_points),
                        key=lambda pair: pair[0]["workhorse.budget"])
    print(json.dumps(found, sort_keys=True))
''')


def test_budget_gauges_report_limit_and_active_units_by_budget_name() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {
        "workhorse.budget.concurrency.active": [
            [{"workhorse.budget": "ghost"}, 2], [{"workhorse.budget": "openai"}, 7]],
        # A budget nobody declared has no limit: no observation rather than a made-up one.
        "workhorse.budget.concurrency.limit": [[{"workhorse.budget": "openai"}, 50]],
    }
