"""The schedule logic evaluated at fixed instants: the epoch grid of every=, cron in a zone
across both of Europe/Oslo's DST transitions, and the catch-up rule. No clock, no sleeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from workhorse import InvalidScheduleError, ScheduleDefinition
from workhorse._occurrences import CATCH_UP_ALL_LIMIT, Timing, every_microseconds


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def cron(expression: str, tz: str = "UTC") -> Timing:
    return Timing(expression, None, tz)


def every(duration: str) -> Timing:
    return Timing(None, every_microseconds(duration), "UTC")


def fires(timing: Timing, start: datetime, end: datetime) -> list[str]:
    return [o.strftime("%m-%d %H:%M:%S") for o in timing.between(start, end)]


# ---- every= on the epoch grid ------------------------------------------------------------------


def test_every_fires_on_whole_multiples_since_the_epoch() -> None:
    assert every("30s").after(utc(2026, 5, 1, 12, 0, 7)) == utc(2026, 5, 1, 12, 0, 30)
    assert every("30s").after(utc(2026, 5, 1, 12, 0, 30)) == utc(2026, 5, 1, 12, 1, 0)
    assert every("1s").after(utc(2026, 5, 1, 12, 0, 7, 500)) == utc(2026, 5, 1, 12, 0, 8)
    # 7 s does not divide a minute: the grid is since the epoch, not since the minute.
    seven = every("7s").after(utc(2026, 5, 1))
    assert (seven - utc(1970, 1, 1)).total_seconds() % 7 == 0
    assert fires(every("30s"), utc(2026, 5, 1, 12, 0, 0), utc(2026, 5, 1, 12, 1, 0)) == [
        "05-01 12:00:00", "05-01 12:00:30", "05-01 12:01:00"]


def test_every_ignores_dst_it_counts_real_time() -> None:
    # Oslo's clocks jump at 01:00 UTC on 2026-03-29: an hourly every= stays on the UTC hours.
    hours = every("1h").between(utc(2026, 3, 29, 0), utc(2026, 3, 29, 3))
    assert [o.hour for o in hours] == [0, 1, 2, 3]


# ---- cron in a zone, at both DST transitions ---------------------------------------------------


def test_spring_forward_a_nonexistent_time_fires_once_at_the_first_valid_instant() -> None:
    # 2026-03-29 in Oslo: 02:00 CET becomes 03:00 CEST, so 02:30 local does not exist.
    daily = cron("30 2 * * *", "Europe/Oslo")
    got = daily.between(utc(2026, 3, 27), utc(2026, 3, 31))
    assert got == [
        utc(2026, 3, 27, 1, 30),   # 02:30 CET
        utc(2026, 3, 28, 1, 30),   # 02:30 CET
        utc(2026, 3, 29, 1, 0),    # 03:00 CEST: the first valid instant after 02:30
        utc(2026, 3, 30, 0, 30),   # 02:30 CEST
    ]
    # A time at 03:00 already fires at 03:00 that day: the two fire at the same instant, once each.
    assert cron("0 3 * * *", "Europe/Oslo").after(utc(2026, 3, 29)) == utc(2026, 3, 29, 1, 0)


def test_fall_back_an_ambiguous_time_fires_once() -> None:
    # 2026-10-25 in Oslo: 03:00 CEST becomes 02:00 CET, so 02:30 local happens twice.
    daily = cron("30 2 * * *", "Europe/Oslo")
    got = daily.between(utc(2026, 10, 24), utc(2026, 10, 27))
    assert got == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    # A wildcard hour: each wall-clock time of the repeated hour fires once, at its first pass.
    half_hours = cron("*/30 * * * *", "Europe/Oslo").between(
        utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 2, 30))
    local = [o.astimezone(ZoneInfo("Europe/Oslo")).strftime("%H:%M%z") for o in half_hours]
    assert local == ["01:30+0200", "02:00+0200", "02:30+0200", "03:00+0100", "03:30+0100"]
    assert len(set(half_hours)) == len(half_hours)


def test_fall_back_evaluated_during_the_repeated_hour_never_goes_back() -> None:
    # 01:00-02:00 UTC on 2026-10-25 is Oslo's second pass through 02:00-03:00 local. Asked
    # from inside it, the next 02:30 is the next day's (today's fired at 00:30 UTC, first pass),
    # never the earlier instant of the same wall time; a pass there enqueues nothing.
    daily = cron("30 2 * * *", "Europe/Oslo")
    for minute in range(0, 60, 7):
        inside = utc(2026, 10, 25, 1, minute, 7)
        assert daily.after(inside) == utc(2026, 10, 26, 1, 30), inside
        assert daily.between(inside, inside + timedelta(hours=2)) == []
        assert daily.due(utc(2026, 10, 26, 1, 30), inside, "latest") == (
            [], utc(2026, 10, 26, 1, 30))
    # The same in New York's repeated 01:00-02:00 (05:00-06:00 UTC on 2026-11-01).
    new_york = cron("30 1 * * *", "America/New_York")
    assert new_york.after(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 2, 6, 30)
    # Every occurrence asked for, from anywhere in the transition day, lies after the instant.
    for timing in (daily, cron("59 2 * * *", "Europe/Oslo"), cron("*/7 * * * *", "Europe/Oslo")):
        for minute in range(0, 6 * 60, 11):
            instant = utc(2026, 10, 24, 22) + timedelta(minutes=minute, seconds=3)
            assert timing.after(instant) > instant
            found = timing.between(instant, instant + timedelta(hours=1))
            assert all(instant <= o <= instant + timedelta(hours=1) for o in found)
            assert len(set(found)) == len(found)


def test_cron_evaluates_in_its_zone() -> None:
    weekday_nine = cron("0 9 * * mon-fri", "Europe/Oslo")
    # Friday 2026-05-01 09:00 CEST is 07:00 UTC; the next is Monday 2026-05-04.
    assert weekday_nine.after(utc(2026, 5, 1, 6)) == utc(2026, 5, 1, 7)
    assert weekday_nine.after(utc(2026, 5, 1, 7)) == utc(2026, 5, 4, 7)
    # Winter: 09:00 CET is 08:00 UTC.
    assert weekday_nine.after(utc(2026, 12, 1)) == utc(2026, 12, 1, 8)


def test_the_walk_back_agrees_with_the_walk_forward_across_dst() -> None:
    for timing in (cron("*/30 * * * *", "Europe/Oslo"), cron("30 2 * * *", "Europe/Oslo")):
        for before in (utc(2026, 3, 29, 2), utc(2026, 10, 25, 2), utc(2026, 10, 26, 3)):
            forward = timing.between(before - timedelta(days=3), before - timedelta(microseconds=1))
            assert timing.last_before(before, before - timedelta(days=3), 5) == forward[-5:]


# ---- the firing rule: on time within 60 s, then the catch-up policy -----------------------------


NOW = utc(2026, 5, 1, 12, 10, 0, 250_000)


@pytest.mark.parametrize("policy", ["latest", "all", "skip"])
def test_occurrences_at_most_60s_overdue_always_fire(policy: str) -> None:
    fired, following = every("10s").due(utc(2026, 5, 1, 12, 9, 10), NOW, policy)
    assert fired == [utc(2026, 5, 1, 12, 9, s) for s in (10, 20, 30, 40, 50)] + [
        utc(2026, 5, 1, 12, 10, 0)]
    assert following == utc(2026, 5, 1, 12, 10, 10)


def test_catch_up_after_every_supervisor_was_down() -> None:
    down_since = utc(2026, 5, 1, 11, 0, 0)  # 70 minutes of 10 s occurrences: 420 of them
    on_time = [utc(2026, 5, 1, 12, 9, s) for s in (10, 20, 30, 40, 50)] + [utc(2026, 5, 1, 12, 10)]
    latest, _ = every("10s").due(down_since, NOW, "latest")
    assert latest == [utc(2026, 5, 1, 12, 9, 0), *on_time]
    skipped, _ = every("10s").due(down_since, NOW, "skip")
    assert skipped == on_time
    everything, following = every("10s").due(down_since, NOW, "all")
    missed = everything[:-len(on_time)]
    assert len(missed) == CATCH_UP_ALL_LIMIT
    assert missed[-1] == utc(2026, 5, 1, 12, 9, 0)
    assert missed == [utc(2026, 5, 1, 12, 9) - timedelta(seconds=10 * k)
                      for k in range(99, -1, -1)]
    assert following == utc(2026, 5, 1, 12, 10, 10)


def test_catch_up_for_cron_takes_the_most_recent_missed() -> None:
    hourly = cron("0 * * * *", "Europe/Oslo")
    fired, following = hourly.due(utc(2026, 5, 1, 1), utc(2026, 5, 1, 12, 30), "latest")
    assert fired == [utc(2026, 5, 1, 12)]
    fired, _ = hourly.due(utc(2026, 5, 1, 1), utc(2026, 5, 1, 12, 30), "all")
    assert fired == [utc(2026, 5, 1, h) for h in range(1, 13)]
    assert following == utc(2026, 5, 1, 13)


def test_nothing_due_moves_nothing() -> None:
    assert every("1s").due(utc(2026, 5, 1, 12, 11), NOW, "latest") == ([], utc(2026, 5, 1, 12, 11))


# ---- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"cron": "61 * * * *"}, {"cron": "* * *"}, {"cron": "* * * * * *"}, {"cron": "@daily"},
    {"every": "0s"}, {"every": "soon"}, {"every": -5}, {"every": "500ms"},
    {"every": "1s", "tz": "Mars/Olympus_Mons"}, {"every": "1s", "tz": ""},
    {"every": "1s", "catch_up": "sometimes"}, {}, {"cron": "* * * * *", "every": "1m"},
    {"every": "1s", "args": "abc"}, {"every": "1s", "kwargs": {1: 2}},
])
def test_bad_definitions_raise_invalid_schedule_error(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidScheduleError):
        ScheduleDefinition("s", "tasks.t", **fields)  # type: ignore[arg-type]


def test_every_is_kept_in_its_canonical_spelling() -> None:
    assert ScheduleDefinition("s", "t", every="90s").every == "90s"
    assert ScheduleDefinition("s", "t", every="3600").every == "1h"
    assert ScheduleDefinition("s", "t", every=timedelta(minutes=2)).every == "2m"
    assert ScheduleDefinition("s", "t", every="1.5s").every == "1500ms"
