"""The anchored clock: elapsed time from the monotonic clock, steps of the wall clock reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from rolloutd.clock import AnchoredClock

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
TICK = timedelta(seconds=5)


class Host:
    """A host's two clocks, each moved by hand: time passing moves both, an NTP step one."""

    def __init__(self) -> None:
        self.wall_time = T0
        self.monotonic_time = 1000.0

    def wall(self) -> datetime:
        return self.wall_time

    def monotonic(self) -> float:
        return self.monotonic_time

    def elapse(self, seconds: float) -> None:
        self.wall_time += timedelta(seconds=seconds)
        self.monotonic_time += seconds

    def step(self, delta: timedelta) -> None:
        self.wall_time += delta


def _clock(host: Host) -> AnchoredClock:
    return AnchoredClock(wall=host.wall, monotonic=host.monotonic)


def test_the_clock_starts_at_the_wall_time_and_moves_with_the_monotonic_clock() -> None:
    """It reads the wall clock once, then adds the monotonic seconds elapsed since."""
    host = Host()
    clock = _clock(host)
    assert clock.now() == clock() == T0
    host.elapse(90)
    assert clock.now() == T0 + timedelta(seconds=90)
    host.monotonic_time += 10  # the wall clock stepped back 10 s meanwhile
    assert clock() == T0 + timedelta(seconds=100)


def test_steps_of_the_wall_clock_do_not_move_the_clock() -> None:
    """After a step back and a step forward of an hour, the clock has moved only as much as
    the monotonic clock did."""
    host = Host()
    clock = _clock(host)
    host.elapse(60)
    host.step(-HOUR)
    assert clock.now() == T0 + timedelta(seconds=60)
    host.elapse(60)
    host.step(HOUR)
    assert clock.now() == T0 + timedelta(seconds=120)
    assert host.wall() == T0 + timedelta(seconds=120)


def test_each_step_is_reported_once_with_its_sign() -> None:
    """A step back and later a step forward are each reported once, by their signed size."""
    host = Host()
    clock = _clock(host)
    assert clock.jump(TICK) is None
    host.elapse(30)
    host.step(-HOUR)
    assert clock.jump(TICK) == -HOUR
    assert clock.jump(TICK) is None
    host.elapse(600)
    assert clock.jump(TICK) is None
    host.step(HOUR)
    assert clock.jump(TICK) == HOUR
    host.elapse(30)
    assert clock.jump(TICK) is None


def test_steps_up_to_the_threshold_add_up_until_they_pass_it() -> None:
    """Steps no larger than the threshold are not reported alone; their sum is, once it is
    larger, and the skew since the anchor is their total."""
    host = Host()
    clock = _clock(host)
    host.step(timedelta(seconds=3))
    assert clock.jump(TICK) is None
    host.step(timedelta(seconds=3))
    assert clock.jump(TICK) == timedelta(seconds=6)
    host.step(timedelta(seconds=-5))
    assert clock.jump(TICK) is None
    assert clock.skew() == timedelta(seconds=1)


def test_the_anchor_is_kept_in_utc() -> None:
    """A wall clock that answers in another zone still gives UTC times."""
    host = Host()
    host.wall_time = T0.astimezone(timezone(timedelta(hours=2)))
    clock = _clock(host)
    assert clock.now().tzinfo is UTC and clock.now() == T0
