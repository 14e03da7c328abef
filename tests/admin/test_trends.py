"""The app index's trends: turns by status, tripwires and p95 latency per day over the last 30 days, as
small inline SVG charts beside "Turns today". The per-day figures are checked against hand-computed
values, in the site's time zone, and on the page, for the users allowed to see them."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memproc import models
from memproc.admin import charts
from memproc.selectors.stats import tripwires_per_day, turns_per_day
from tests.factories import TripwireLogFactory, UserFactory

pytestmark = pytest.mark.django_db

APP_INDEX = reverse("admin:app_list", args=["memproc"])
# The app index with every chart, whatever the number of rows: the session and the user, memproc's
# counts (2), "Turns today" (2) and the trends (3: turns by day and status, their durations, tripwires).
APP_INDEX_MAX_QUERIES = 9


def at(day: date, hour: int = 12, minute: int = 0) -> datetime:
    """`hour:minute` on `day` in the current time zone."""
    return datetime.combine(day, time(hour, minute), tzinfo=timezone.get_current_timezone())


def turn(started_at: datetime, status: str = "completed", ms: float = 100.0) -> None:
    models.TurnRecord.objects.create(agent_id="support", status=status, duration_ms=ms, started_at=started_at)


def tripwire(created_at: datetime) -> None:
    TripwireLogFactory(created_at=created_at)


def iso(day: date) -> str:
    return day.isoformat()


@pytest.fixture
def today() -> date:
    return timezone.localdate()


@pytest.fixture
def month(today):
    """Rows over the last 30 days and just outside them (today is day 0):

    day 0:  completed 100 ms and 300 ms, blocked 20 ms, failed 50 ms; 2 tripwires
    day 1:  nothing
    day 2:  20 completed turns of 10, 20, ..., 200 ms; 3 tripwires
    day 29: blocked 5 ms; 1 tripwire (the first day of the 30)
    day 30 and tomorrow: one turn and one tripwire each, outside the window
    """
    turn(at(today, 1), ms=100.0)
    turn(at(today, 2), ms=300.0)
    turn(at(today, 3), "blocked", ms=20.0)
    turn(at(today, 4), "failed", ms=50.0)
    for i in range(20):
        turn(at(today - timedelta(days=2), 8, i), ms=10.0 * (i + 1))
    turn(at(today - timedelta(days=29), 0, 0), "blocked", ms=5.0)
    for day, logs in ((0, 2), (2, 3), (29, 1)):
        for _ in range(logs):
            tripwire(at(today - timedelta(days=day)))
    for outside in (today - timedelta(days=30), today + timedelta(days=1)):
        turn(at(outside), ms=99_999.0)
        tripwire(at(outside))


def get_ok(client, url: str = APP_INDEX) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def section(page: str, element_id: str) -> str:
    """The element with this id, up to its </figure> or, for the module, its closing comment."""
    start = page.index(f'id="{element_id}"')
    end = (
        page.index("</figure>", start)
        if element_id.startswith("memproc-trend-")
        else page.index("<!-- /memproc-trends -->", start)
    )
    return page[start:end]


def summary_of(figure: str) -> str:
    match = re.search(r'<p class="memproc-trend-summary"[^>]*>(.*?)</p>', figure, re.S)
    assert match, figure
    return " ".join(re.sub(r"<[^>]+>", "", match.group(1)).split())  # as a screen reader reads it


def staff_with(*codenames: str):
    user = UserFactory(is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return type(user).objects.get(pk=user.pk)  # a fresh permission cache


# --- the selectors --------------------------------------------------------------------------------


def test_turns_per_day_counts_statuses_and_the_nearest_rank_p95(month, today, django_assert_max_num_queries):
    with django_assert_max_num_queries(2):
        days = turns_per_day(days=30)
    assert len(days) == 30
    assert days[0].day == today - timedelta(days=29) and days[-1].day == today  # oldest first
    by_day = {d.day: d for d in days}

    day0 = by_day[today]
    assert (day0.completed, day0.blocked, day0.failed, day0.turns) == (2, 1, 1, 4)
    assert day0.p95_ms == 300.0  # nearest rank of 4: the 4th of 20, 50, 100, 300

    empty = by_day[today - timedelta(days=1)]
    assert (empty.completed, empty.blocked, empty.failed, empty.turns, empty.p95_ms) == (0, 0, 0, 0, None)

    busy = by_day[today - timedelta(days=2)]
    assert (busy.completed, busy.turns) == (20, 20)
    assert busy.p95_ms == 190.0  # rank ceil(0.95 * 20) = 19; interpolating would say 190.5

    first = by_day[today - timedelta(days=29)]
    assert (first.blocked, first.turns, first.p95_ms) == (1, 1, 5.0)

    assert sum(d.turns for d in days) == 25  # nothing from day 30 or tomorrow
    assert all(d.p95_ms != 99_999.0 for d in days)


def test_tripwires_per_day(month, today, django_assert_max_num_queries):
    with django_assert_max_num_queries(1):
        days = tripwires_per_day(days=30)
    assert [d.day for d in days] == [today - timedelta(days=29 - i) for i in range(30)]
    counts = {d.day: d.tripwires for d in days}
    assert counts[today] == 2 and counts[today - timedelta(days=2)] == 3
    assert counts[today - timedelta(days=29)] == 1 and counts[today - timedelta(days=1)] == 0
    assert sum(counts.values()) == 6


def test_the_nearest_rank_p95_of_one_and_of_21_turns(today):
    turn(at(today), ms=42.0)
    for i in range(21):
        turn(at(today - timedelta(days=1)), ms=float(i + 1))  # 1..21 ms
    by_day = {d.day: d.p95_ms for d in turns_per_day(days=2)}
    assert by_day == {today: 42.0, today - timedelta(days=1): 20.0}  # rank ceil(19.95) = 20


def test_days_are_the_site_time_zones(settings):
    """In Los Angeles, 2026-11-01 (the first of the 30 days ending 2026-11-30) starts at 07:00 UTC and
    is 25 hours long (summer time ends); a turn at 23:30 on the 10th is on the 11th in UTC."""
    settings.TIME_ZONE = "America/Los_Angeles"
    la = ZoneInfo("America/Los_Angeles")
    rows = {
        datetime(2026, 10, 31, 23, 59, tzinfo=la): 1.0,  # the day before the window
        datetime(2026, 11, 1, 0, 0, tzinfo=la): 2.0,  # its first instant
        datetime(2026, 11, 1, 23, 30, tzinfo=la): 3.0,  # 2026-11-02 07:30 UTC
        datetime(2026, 11, 10, 23, 30, tzinfo=la): 4.0,  # 2026-11-11 07:30 UTC
        datetime(2026, 11, 11, 0, 30, tzinfo=la): 5.0,
        datetime(2026, 11, 30, 23, 59, tzinfo=la): 6.0,  # 2026-12-01 07:59 UTC, the window's last minute
        datetime(2026, 12, 1, 0, 0, tzinfo=la): 7.0,  # the day after
    }
    for started_at, ms in rows.items():
        turn(started_at, ms=ms)
        tripwire(started_at)

    turns = {d.day: (d.turns, d.p95_ms) for d in turns_per_day(days=30, today=date(2026, 11, 30)) if d.turns}
    assert turns == {
        date(2026, 11, 1): (2, 3.0),
        date(2026, 11, 10): (1, 4.0),
        date(2026, 11, 11): (1, 5.0),
        date(2026, 11, 30): (1, 6.0),
    }
    tripwires = {
        d.day: d.tripwires for d in tripwires_per_day(days=30, today=date(2026, 11, 30)) if d.tripwires
    }
    assert tripwires == {
        date(2026, 11, 1): 2,
        date(2026, 11, 10): 1,
        date(2026, 11, 11): 1,
        date(2026, 11, 30): 1,
    }

    settings.TIME_ZONE = "UTC"  # the same rows, in UTC days
    utc = {d.day: d.turns for d in turns_per_day(days=30, today=date(2026, 11, 30)) if d.turns}
    assert utc == {date(2026, 11, 1): 2, date(2026, 11, 2): 1, date(2026, 11, 11): 2}


def test_the_current_time_zone_is_used_when_one_is_active():
    tokyo = ZoneInfo("Asia/Tokyo")  # UTC+9, no summer time
    with timezone.override(tokyo):
        local_today = timezone.localdate()
        turn(datetime.combine(local_today, time(0, 30), tzinfo=tokyo))  # the previous day in UTC
        assert turns_per_day(days=1)[0].turns == 1


# --- the charts -----------------------------------------------------------------------------------


def test_stacked_bars_scale_to_the_busiest_day():
    days = [date(2026, 11, 28), date(2026, 11, 29), date(2026, 11, 30)]
    chart = charts.stacked_bars(
        days=days,
        stacks=[[("completed", 10), ("blocked", 10)], [], [("completed", 5), ("blocked", 0)]],
        data=["a", "b", "c"],
    )
    busiest, empty, half = chart.columns
    assert chart.peak is busiest and busiest.data == "a"
    assert [bar.css for bar in busiest.bars] == ["completed", "blocked"]
    assert float(busiest.bars[-1].y) == charts.TOP  # the busiest day reaches the top
    assert sum(float(bar.height) for bar in busiest.bars) == charts.HEIGHT - charts.TOP
    assert empty.bars == ()
    assert [bar.css for bar in half.bars] == ["completed"]  # no bar for a zero
    assert float(half.bars[0].height) == (charts.HEIGHT - charts.TOP) / 4


def test_a_line_breaks_at_days_without_a_value():
    days = [date(2026, 11, d) for d in range(26, 31)]
    chart = charts.line(days=days, values=[100.0, 200.0, None, 50.0, 50.0], data=list(range(5)))
    assert chart.path.count("M") == 2 and chart.path.count("L") == 2
    assert len(chart.points) == 4
    assert chart.peak.data == 1 and chart.low.data == 4  # the latest of equal values
    assert charts.line(days=days, values=[None] * 5, data=list(range(5))).peak is None


# --- the page -------------------------------------------------------------------------------------


def test_the_app_index_shows_the_charts_beside_turns_today(admin_client, month, today):
    page = get_ok(admin_client)
    assert page.index('id="memproc-turn-stats"') < page.index('id="memproc-trends"')
    trends = section(page, "memproc-trends")
    assert "<script" not in trends and "src=" not in trends and "href=" not in trends  # nothing to fetch

    turns = section(page, "memproc-trend-turns")
    assert '<svg role="img" aria-labelledby="memproc-trend-turns-title"' in turns
    assert '<title id="memproc-trend-turns-title">Turns per day, last 30 days</title>' in turns
    assert summary_of(turns) == (
        f"Turns over the last 30 days: 25, most on {iso(today - timedelta(days=2))} (20); 2 blocked, 1 failed."
    )
    assert f'<time datetime="{iso(today - timedelta(days=2))}">' in turns  # one line, read as a date
    assert f"<title>{iso(today)}: 4 turns (2 completed, 1 blocked, 1 failed)</title>" in turns
    assert (
        f"<title>{iso(today - timedelta(days=1))}: 0 turns (0 completed, 0 blocked, 0 failed)</title>"
        in turns
    )
    assert turns.count("<title") == 31  # the chart's and one per day

    tripwires = section(page, "memproc-trend-tripwires")
    assert '<title id="memproc-trend-tripwires-title">Tripwires per day, last 30 days</title>' in tripwires
    assert summary_of(tripwires) == (
        f"Tripwires over the last 30 days: 6, most on {iso(today - timedelta(days=2))} (3)."
    )
    assert f"<title>{iso(today)}: 2 tripwires</title>" in tripwires

    latency = section(page, "memproc-trend-latency")
    assert '<title id="memproc-trend-latency-title">p95 latency per day, last 30 days</title>' in latency
    assert summary_of(latency) == (
        f"p95 latency per day over the last 30 days: highest 300 ms on {iso(today)}, "
        f"lowest 5.0 ms on {iso(today - timedelta(days=29))}."
    )
    assert f"<title>{iso(today - timedelta(days=2))}: p95 190 ms over 20 turns</title>" in latency
    assert f"<title>{iso(today - timedelta(days=1))}: no turns</title>" in latency


def test_the_charts_say_when_there_is_nothing(admin_client):
    page = get_ok(admin_client)
    assert summary_of(section(page, "memproc-trend-turns")) == "No turns in the last 30 days."
    assert summary_of(section(page, "memproc-trend-tripwires")) == "No tripwires in the last 30 days."
    assert summary_of(section(page, "memproc-trend-latency")) == "No turns in the last 30 days."


def test_the_charts_are_on_the_app_index_only(admin_client, month):
    assert 'id="memproc-trends"' not in get_ok(admin_client, reverse("admin:memproc_turnrecord_changelist"))


@pytest.mark.parametrize(
    ("codenames", "shown"),
    [
        (["view_thread"], set()),
        (["view_thread", "view_turnrecord"], {"turns", "latency"}),
        (["view_tripwirelog"], {"tripwires"}),
        (["change_tripwirelog"], {"tripwires"}),  # as the pending-tripwire count decides
        (["view_turnrecord", "view_tripwirelog"], {"turns", "latency", "tripwires"}),
    ],
)
def test_each_chart_needs_its_view_permission(client, month, codenames, shown):
    client.force_login(staff_with(*codenames))
    page = get_ok(client)
    assert ('id="memproc-trends"' in page) == bool(shown)
    assert {
        name for name in ("turns", "latency", "tripwires") if f'id="memproc-trend-{name}"' in page
    } == shown


def test_the_app_index_makes_a_bounded_number_of_queries(admin_client, month, today):
    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            get_ok(admin_client)
        return len(ctx.captured_queries)

    few = queries()
    for day in range(30):
        for i in range(5):
            turn(at(today - timedelta(days=day), 6, i), ["completed", "blocked", "failed"][i % 3], ms=i + 1.0)
            tripwire(at(today - timedelta(days=day), 7, i))
    assert queries() == few <= APP_INDEX_MAX_QUERIES
