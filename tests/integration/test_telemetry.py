"""OpenTelemetry, with the SDK: spans from enqueue to run across processes, the instrument names,
and the one attribute (`workhorse.queue`, never a raw key).

The SDK's global providers can be set once per process, so everything runs in subprocesses: an
enqueuer (in-memory span exporter and metric reader) and a real `workhorse worker` whose app module
exports to files, since its slots are forked and end with `os._exit`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

KEY = "secret-tenant-42"  # a raw concurrency key: it must never become an attribute
QUEUE = "otel-q"
COUNTERS = ("workhorse.jobs.claimed", "workhorse.jobs.succeeded", "workhorse.jobs.failed",
            "workhorse.jobs.retried", "workhorse.jobs.held")
HISTOGRAMS = ("workhorse.job.duration", "workhorse.job.queue_wait")
GAUGES = ("workhorse.queue.concurrency.limit", "workhorse.queue.concurrency.active",
          "workhorse.queue.concurrency.blocked_ready", "workhorse.queue.rate.limit",
          "workhorse.queue.rate.limited_keys")

APP_MODULE = textwrap.dedent('''
    """A workhorse app whose module installs the OpenTelemetry SDK when WH_OTEL_OUT is set:
    spans and metric snapshots go to files there, one per process."""

    import json
    import os

    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter, MetricExportResult, PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import workhorse

    OUT = os.environ.get("WH_OTEL_OUT")


    def span_record(span):
        return {
            "name": span.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent_id": span.parent.span_id if span.parent else None,
            "attributes": dict(span.attributes or {}),
        }


    def metric_points(data):
        points = []
        for resource_metrics in data.resource_metrics if data is not None else []:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        points.append({
                            "name": metric.name,
                            "attributes": dict(point.attributes or {}),
                            "value": getattr(point, "value", None),
                            "count": getattr(point, "count", None),
                        })
        return points


    class SpanFile(SpanExporter):
        def export(self, spans):
            with open(os.path.join(OUT, f"spans-{os.getpid()}.jsonl"), "a") as f:
                for span in spans:
                    f.write(json.dumps(span_record(span)) + "\\n")
            return SpanExportResult.SUCCESS


    class MetricFile(MetricExporter):
        def export(self, metrics_data, timeout_millis=10_000, **kwargs):
            path = os.path.join(OUT, f"metrics-{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(metric_points(metrics_data), f)
            os.replace(path + ".tmp", path)
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis=10_000):
            return True

        def shutdown(self, timeout_millis=30_000, **kwargs):
            pass


    if OUT:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(SpanFile()))
        trace.set_tracer_provider(tracer_provider)
        reader = PeriodicExportingMetricReader(MetricFile(), export_interval_millis=100)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    app = workhorse.App("otel")


    def tenant_key(tenant):
        return tenant


    @app.task(name="ok", queue="otel-q", concurrency_key=tenant_key)
    def ok(tenant):
        return {"done": True}


    @app.task(name="flaky", queue="otel-q", concurrency_key=tenant_key, max_attempts=2,
              retry_backoff=0)
    def flaky(tenant):
        raise RuntimeError("always")


    @app.task(name="stuck", queue="otel-q", concurrency_key=tenant_key, max_attempts=1,
              on_failure="hold")
    def stuck(tenant):
        raise RuntimeError("hold me")
''')

ENQUEUER = textwrap.dedent('''
    import json
    import sys

    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    import importlib

    from workhorse import PolicyHealth, QueueHealth, telemetry

    module = importlib.import_module(sys.argv[1])
    key = sys.argv[2]
    ids = {name: getattr(module, name).delay(key).id for name in ("ok", "flaky", "stuck")}
    module.app.close()

    before = module.metric_points(reader.get_metrics_data())
    telemetry.publish_health(QueueHealth(
        policies=[
            PolicyHealth("otel", "limited", 7, 2, 3, 4, 5, 1, False),
            PolicyHealth("otel", "per-key-only", None, 2, 1, None, 6, 0, False),
            PolicyHealth("otel", "rated", None, None, 0, None, 0, 0, False, rate_limit="120/m",
                         rate_limit_per_key="5/s", rate_limited_keys=3),
        ],
        depth={},
    ))
    after = module.metric_points(reader.get_metrics_data())
    print(json.dumps({
        "ids": ids,
        "spans": [module.span_record(span) for span in spans.get_finished_spans()],
        "before": before,
        "after": after,
    }))
''')


def _wait_for(check: Callable[[], T | None], timeout: float, what: str, log: Path) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; worker output:\n"
                                 f"{log.read_text(errors='replace')}")
        time.sleep(0.1)


def _worker_metrics(out: Path) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for path in out.glob("metrics-*.json"):
        try:
            points.extend(json.loads(path.read_text()))
        except (OSError, ValueError):  # replaced as we read it: the next poll sees it
            continue
    return points


def _totals(points: list[dict[str, Any]]) -> dict[str, float]:
    """Counter values (histogram counts) summed across processes and attributes."""
    totals: dict[str, float] = {}
    for point in points:
        amount = point["value"] if point["value"] is not None else point["count"]
        totals[point["name"]] = totals.get(point["name"], 0) + amount
    return totals


def _statuses(database_url: str, ids: dict[str, int]) -> dict[str, str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, status FROM workhorse.jobs WHERE id = ANY(%s)",
                            (list(ids.values()),)).fetchall()
    by_id: dict[int, str] = dict(rows)
    return {name: by_id[job_id] for name, job_id in ids.items()}


def _assert_only_queue_attribute(points: list[dict[str, Any]]) -> None:
    for point in points:
        assert set(point["attributes"]) == {"workhorse.queue"}, point
    assert KEY not in json.dumps(points)


def test_spans_and_metrics_from_enqueue_to_run(
    database_url: str, tmp_path: Path
) -> None:
    module = f"otelapp_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{module}.py").write_text(APP_MODULE)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    env.pop("WH_OTEL_OUT", None)

    # 1. Enqueue, in a process with in-memory SDK exporters; then publish a health snapshot.
    enqueued = subprocess.run(
        [sys.executable, "-c", ENQUEUER, module, KEY], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60,
    )
    assert enqueued.returncode == 0, enqueued.stderr
    report = json.loads(enqueued.stdout.strip().splitlines()[-1])
    ids: dict[str, int] = report["ids"]
    enqueue_spans = {s["attributes"]["workhorse.task"]: s for s in report["spans"]}
    assert set(enqueue_spans) == {"ok", "flaky", "stuck"}
    for span in report["spans"]:
        assert span["name"] == "workhorse.enqueue"
        assert span["attributes"]["workhorse.queue"] == QUEUE
    assert len({s["trace_id"] for s in report["spans"]}) == 3

    # The gauges report nothing before a snapshot, then the snapshot's values, per queue.
    assert not [p for p in report["before"] if p["name"] in GAUGES]
    gauges = {(p["name"], p["attributes"]["workhorse.queue"]): p["value"]
              for p in report["after"] if p["name"] in GAUGES}
    assert gauges == {
        ("workhorse.queue.concurrency.limit", "limited"): 7,
        ("workhorse.queue.concurrency.active", "limited"): 3,
        ("workhorse.queue.concurrency.active", "per-key-only"): 1,
        ("workhorse.queue.concurrency.blocked_ready", "limited"): 5,
        ("workhorse.queue.concurrency.blocked_ready", "per-key-only"): 6,
        ("workhorse.queue.concurrency.active", "rated"): 0,
        ("workhorse.queue.concurrency.blocked_ready", "rated"): 0,
        ("workhorse.queue.rate.limit", "rated"): 2.0,  # 120/m as starts per second
        ("workhorse.queue.rate.limited_keys", "rated"): 3,
    }
    _assert_only_queue_attribute(report["after"])

    # 2. Run the jobs through a real worker whose app module exports to files.
    log = tmp_path / "worker.log"
    with log.open("wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workhorse", "worker", f"{module}:app", "--slots", "1",
             "--concurrency", "2", "--lease", "10s", "--dequeue-timeout", "1s", "--grace", "5s"],
            cwd=tmp_path, env={**env, "WH_OTEL_OUT": str(out)}, stdout=log_file,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        try:
            expected = {"ok": "succeeded", "flaky": "failed", "stuck": "held"}
            _wait_for(lambda: _statuses(database_url, ids) == expected, 60, "the jobs", log)
            wanted = {"workhorse.jobs.claimed": 4, "workhorse.jobs.succeeded": 1,
                      "workhorse.jobs.failed": 1, "workhorse.jobs.retried": 1,
                      "workhorse.jobs.held": 1, "workhorse.job.duration": 4,
                      "workhorse.job.queue_wait": 4}

            def counted() -> dict[str, float] | None:
                totals = _totals(_worker_metrics(out))
                return totals if all(totals.get(k) == v for k, v in wanted.items()) else None

            totals = _wait_for(counted, 20, f"metrics {wanted}", log)
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
            try:
                code = worker.wait(30)
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
    assert code == 0, log.read_text(errors="replace")
    assert set(COUNTERS) | set(HISTOGRAMS) <= set(totals)

    points = _worker_metrics(out)
    _assert_only_queue_attribute(points)
    assert {p["attributes"]["workhorse.queue"] for p in points} == {QUEUE}

    # 3. Each run span (one per attempt) is a child of its job's enqueue span.
    runs = [json.loads(line) for path in out.glob("spans-*.jsonl")
            for line in path.read_text().splitlines()]
    assert {s["name"] for s in runs} == {"workhorse.run"}
    by_task: dict[str, list[dict[str, Any]]] = {}
    for span in runs:
        by_task.setdefault(span["attributes"]["workhorse.task"], []).append(span)
    assert {task: len(spans) for task, spans in by_task.items()} == {
        "ok": 1, "flaky": 2, "stuck": 1,
    }
    for task, spans in by_task.items():
        parent = enqueue_spans[task]
        for span in spans:
            assert span["trace_id"] == parent["trace_id"], (task, span)
            assert span["parent_id"] == parent["span_id"], (task, span)
            assert span["attributes"]["workhorse.queue"] == QUEUE
            assert span["attributes"]["workhorse.job.id"] == ids[task]
    assert sorted(s["attributes"]["workhorse.job.attempt"] for s in by_task["flaky"]) == [1, 2]
    assert KEY not in json.dumps(report["spans"]) + json.dumps(runs)
