"""rolloutctl status --watch, the history timeline, and shell completion."""

from __future__ import annotations

import copy
import io
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from rolloutd import views
from rolloutd.cli.ctl import main
from rolloutd.cli.render import sparkline
from tests.outbox.harness import PLAN, SECRET, Harness

if TYPE_CHECKING:
    from conftest import StoreHandle
    from sqlalchemy.orm import Session

    from rolloutd.store.models import Rollout


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(exited.value.code or 0), out, err


@pytest.fixture
def rollout(store: StoreHandle, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """A rollout at 5% whose queue-timeout gate has a few values; rolloutctl points at it."""
    monkeypatch.setenv("ROLLOUTD_DATABASE_URL", store.url)
    monkeypatch.setenv("ROLLOUTD_ENV_FILE", "/nonexistent")
    h = Harness(store, {"SLACK_WEBHOOK_OPS": f"https://hooks.slack.test/services/{SECRET}"})
    h.tick()
    for rate in (0.002, 0.003, 0.004, 0.006):
        h.metrics.set("queue_timeout_rate", "canary", rate, samples=500)
        h.tick(seconds=30)
    return h


def test_watch_of_an_ended_rollout_draws_one_frame_and_exits(
    rollout: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    """The frame shows step, weights, each gate's value, threshold, verdict and trend, and
    the last events; a rollout that has ended stops the watch at once."""
    rollout.metrics.set("oom_events", "canary", 2)
    rollout.tick(seconds=5)
    assert rollout.tick(seconds=5) == "rolled_back"
    code, out, _ = _run(capsys, "status", str(rollout.rollout_id), "--watch", "--interval", "0.05")
    assert code == 0
    assert "step 1 of 4: canary 5%" in out
    assert "weights: stable 100% / canary 0%" in out
    assert "queue_timeouts" in out and "<= 0.01" in out and "0.006" in out
    _, raw, _ = _run(capsys, "status", str(rollout.rollout_id), "--watch", "-o", "json")
    trend = next(g for g in json.loads(raw)["gates"] if g["name"] == "queue_timeouts")["trend"]
    assert trend[:4] == [0.002, 0.003, 0.004, 0.006]
    assert sparkline(trend) in out
    assert "rollback_started" in out and "rolled_back" in out
    assert "(ended)" in out
    assert SECRET not in out


def test_watch_refreshes_until_the_rollout_ends(
    rollout: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--output json prints one object per redraw and stops once the rollout has ended."""
    drawn: list[dict[str, Any]] = []
    two_drawn = threading.Event()
    real = views.watch_view

    def counted(session: Session, row: Rollout) -> dict[str, Any]:
        drawn.append(real(session, row))
        if len(drawn) >= 2:
            two_drawn.set()
        return drawn[-1]

    monkeypatch.setattr(views, "watch_view", counted)

    def roll_back() -> None:
        two_drawn.wait(10)  # the watch has redrawn the running rollout
        rollout.metrics.set("oom_events", "canary", 1)
        rollout.tick(seconds=5)
        rollout.tick(seconds=5)

    worker = threading.Thread(target=roll_back)
    worker.start()
    code, out, _ = _run(
        capsys, "status", str(rollout.rollout_id), "--watch", "--interval", "0.05", "-o", "json"
    )
    worker.join()
    # The rollout's own log lines (the test's reconciler) share stdout; frames are the JSON.
    frames = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0
    assert len(frames) >= 3
    assert frames[0]["state"] == "running" and not frames[0]["ended"]
    assert frames[-1]["state"] == "rolled_back" and frames[-1]["ended"]
    gate = next(g for g in frames[0]["gates"] if g["name"] == "queue_timeouts")
    assert gate["trend"][-3:] == [0.003, 0.004, 0.006]
    assert frames[-1]["events"][-1]["kind"] == "rolled_back"


def test_watch_needs_a_rollout_id(store: StoreHandle, capsys: pytest.CaptureFixture[str]) -> None:
    """--watch without ID is bad input (exit 2) naming the option."""
    code, _, err = _run(capsys, "status", "--watch")
    assert code == 2
    assert "--watch" in err and "ID" in err


def test_history_is_a_timeline_with_days_and_elapsed_time(
    rollout: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events under a date heading, each with its time and the time since the first event."""
    rollout.metrics.set("oom_events", "canary", 1)
    rollout.tick(hours=3)
    code, out, _ = _run(capsys, "history", str(rollout.rollout_id))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "2026-03-02"
    assert lines[1].split()[:3] == ["09:00:00", "+0s", "created"]
    assert lines[-1].split()[:3] == ["12:02:00", "+3h02m", "rollback_started"]


def test_completion_prints_a_script_for_each_shell(capsys: pytest.CaptureFixture[str]) -> None:
    """bash, zsh and fish scripts hook _ROLLOUTCTL_COMPLETE; another shell is bad input."""
    for shell in ("bash", "zsh", "fish"):
        code, out, _ = _run(capsys, "completion", shell)
        assert code == 0
        assert f"_ROLLOUTCTL_COMPLETE={shell}_complete" in out
    code, _, err = _run(capsys, "completion", "powershell")
    assert code == 2 and "powershell" in err


def test_completion_completes_commands_and_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the bash script asks for: the commands after 'rolloutctl st', options of status."""
    monkeypatch.setenv("_ROLLOUTCTL_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "rolloutctl st")
    monkeypatch.setenv("COMP_CWORD", "1")
    code, out, _ = _run(capsys)
    assert code == 0
    assert {"plain,start", "plain,status"} <= set(out.split())
    monkeypatch.setenv("COMP_WORDS", "rolloutctl status 7 --w")
    monkeypatch.setenv("COMP_CWORD", "3")
    _, out, _ = _run(capsys)
    assert "plain,--watch" in out.split()


def test_a_webhook_url_in_the_plan_is_refused_without_repeating_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pasting the secret URL into webhook_env fails validation (exit 2) naming the field,
    and the message does not show the URL."""
    plan: dict[str, Any] = copy.deepcopy(PLAN)
    plan["alerts"]["channels"]["ops"]["webhook_env"] = f"https://hooks.slack.com/services/{SECRET}"
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    code, out, err = _run(capsys, "plan", "validate", str(path))
    assert code == 2
    assert f"{path}: alerts.channels.ops.webhook_env: must name an environment variable" in out
    assert SECRET not in out + err


def test_a_route_to_an_undefined_channel_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A route naming a channel the plan does not define fails validation, naming both."""
    plan: dict[str, Any] = copy.deepcopy(PLAN)
    plan["alerts"]["routes"]["rolled_back"] = {"channels": ["pager"]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    code, out, _ = _run(capsys, "plan", "validate", str(path))
    assert code == 2
    assert (
        f"{path}: alerts: routes.rolled_back.channels: channel 'pager' is not one of "
        "alerts.channels (oncall, ops)"
    ) in out


def test_a_frame_of_a_rollout_that_nothing_drives_says_so(
    rollout: Harness, store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch of a running rollout with no rolloutd holding the lease says that nothing
    moves it; the same frame once the rollout has ended does not."""
    from rich.console import Console

    from rolloutd.cli import render
    from rolloutd.store import queries

    def drawn() -> str:
        with store.sessions() as session:
            view = views.watch_view(session, queries.get_rollout(session, rollout.rollout_id))
            leader = {"leading": False, "holder": "ops-1:4242", "last_seen": _SEEN}
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(render.watch({**view, "leader": leader}))
        return console.export_text()

    expected = (
        "no rolloutd is leading (last seen 2026-12-04 09:30:05 UTC, ops-1:4242): "
        "nothing moves this rollout until one does"
    )
    assert expected in drawn()
    rollout.metrics.set("oom_events", "canary", 1)
    rollout.tick(seconds=5)
    assert rollout.tick(seconds=5) == "rolled_back"
    assert "no rolloutd" not in drawn()


_SEEN = "2026-12-04T09:30:05+00:00"


def test_watch_piped_prints_each_frame_as_it_comes_one_after_another(
    rollout: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    """Piped, each frame is on stdout before the next is read, with no terminal control
    codes, one frame after the other."""
    from rolloutd.cli import render
    from rolloutd.store import queries

    with rollout.store.sessions.begin() as session:
        view = views.watch_view(session, queries.get_rollout(session, rollout.rollout_id))
    seen: list[str] = []
    frames = iter([False, False, True])

    def frame() -> dict[str, Any]:
        seen.append(capsys.readouterr().out)
        return {**copy.deepcopy(view), "ended": next(frames)}

    render.watch_live(frame, 0.0)
    seen.append(capsys.readouterr().out)
    assert seen[0] == ""
    assert all("step 1 of 4: canary 5%" in out for out in seen[1:])
    assert not any("\x1b" in out for out in seen)
