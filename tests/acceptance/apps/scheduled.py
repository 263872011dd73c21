"""The schedules app: one `every="1s"` schedule, fired by whichever supervisors run."""

from __future__ import annotations

import workhorse

app = workhorse.App("scheduled")


@app.periodic(every="1s", name="tick", queue="ticks")
def tick() -> str:
    """The job itself is the evidence: its scheduled_for is the occurrence it stands for. The
    handler returns the occurrence as it reads it (`current_job().scheduled_for`)."""
    return workhorse.current_job().scheduled_for.isoformat()
