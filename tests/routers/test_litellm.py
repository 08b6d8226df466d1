"""Sessions through a real LiteLLM proxy with rolloutd's plugin: share, stickiness, moves on
a weight change, mirroring, the master key and a proxy that goes down.

2,000 sessions of 15 turns are 30,000 picks: those are made by the plugin's own pick
(:class:`SessionPools`, the code the proxy runs) on the weights the proxy applies, and a
sample of a few hundred real requests through the proxy proves that the proxy routes each
one exactly as that pick says.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.routers.base import RouterState
from rolloutd.routers.litellm_pools import SessionPools, WeightsDirectory
from tests.reconcile.test_reconcile import Harness
from tests.routers.litellm_service import DEPLOYMENTS, GROUP, MASTER_KEY, LiteLLMService
from tests.routers.services import HEADER, session_ids, wait_for

if TYPE_CHECKING:
    from conftest import StoreHandle

SESSIONS = session_ids(2000, seed=11)
TURNS = 15
DEPLOYMENT_LIST = [
    {"model_name": GROUP, "litellm_params": {}, "model_info": {"id": i, "rolloutd_pool": p}}
    for i, p in DEPLOYMENTS.items()
]


def _picks(service: LiteLLMService, sessions: list[str]) -> dict[str, list[str]]:
    """Every turn of every session (turn by turn, sessions interleaved) through the plugin's
    pick on the service's weights directory: the pools each session's turns went to."""
    pools = SessionPools(WeightsDirectory(service.weights_dir))
    seen: dict[str, list[str]] = {s: [] for s in sessions}
    for _ in range(TURNS):
        for session in sessions:
            kwargs: dict[str, Any] = {"metadata": {"headers": {HEADER.lower(): session}}}
            chosen = pools.pick(GROUP, DEPLOYMENT_LIST, kwargs)
            seen[session].append(chosen[0]["model_info"]["rolloutd_pool"])
    return seen


def _on(picks: dict[str, list[str]], pool: str) -> set[str]:
    return {s for s, turns in picks.items() if turns[0] == pool}


@pytest.fixture
def litellm(litellm_service: LiteLLMService) -> Any:
    """The shared proxy, at 0% before and after the test."""
    litellm_service.router().set_weight(0)
    yield litellm_service
    litellm_service.router().set_weight(0)


def test_2000_sessions_of_15_turns_keep_their_pool_and_5_percent_reach_the_canary(
    litellm: LiteLLMService,
) -> None:
    """At 5%, within ±1 point of the 2,000 sessions are on the canary, every one of their 15
    turns on the same pool, and a real-proxy sample of 300 requests lands where the pick
    says."""
    litellm.router().set_weight(5)
    picks = _picks(litellm, SESSIONS)
    assert all(len(set(turns)) == 1 for turns in picks.values())
    share = 100 * len(_on(picks, "canary")) / len(SESSIONS)
    assert 4 <= share <= 6, share
    sample = sorted(_on(picks, "canary"))[:50] + sorted(_on(picks, "stable"))[:100]
    answered = litellm.route(sample * 2)
    assert answered == [picks[s][0] for s in sample * 2]


def test_a_change_from_5_to_25_percent_moves_20_points_and_none_back_to_stable(
    litellm: LiteLLMService,
) -> None:
    """Raising 5% → 25% moves 20 ± 2 points of the sessions, all from stable to the canary;
    on the real proxy every sampled canary session stays on the canary."""
    router = litellm.router()
    router.set_weight(5)
    before = _picks(litellm, SESSIONS)
    router.set_weight(25)
    after = _picks(litellm, SESSIONS)
    moved = {s for s in SESSIONS if before[s][0] != after[s][0]}
    assert 18 <= 100 * len(moved) / len(SESSIONS) <= 22, len(moved)
    assert _on(before, "canary") <= _on(after, "canary")
    sample = sorted(_on(before, "canary"))[:50] + sorted(moved)[:100]
    assert Counter(litellm.route(sample)) == {"canary": len(sample)}


def test_requests_without_a_session_are_split_per_request_by_weight(
    litellm: LiteLLMService,
) -> None:
    """Header-less requests are spread by weight: at 50% both pools get some of 60."""
    litellm.router().set_weight(50)
    answers = Counter(litellm.route([None] * 60))
    assert set(answers) == {"stable", "canary"} and answers.total() == 60


def test_a_shadow_step_mirrors_through_litellm_and_answers_from_stable(
    litellm: LiteLLMService,
) -> None:
    """With mirroring on at 0%, stable answers all 40 requests and the canary replica gets a
    copy of each (LiteLLM's silent_model); with it off, the canary gets nothing."""
    router = litellm.router()
    router.set_weight(0, mirror=True)
    assert router.read_weight() == RouterState(0, True)
    before = litellm.served("canary")
    assert Counter(litellm.route(session_ids(40, seed=21))) == {"stable": 40}
    wait_for(lambda: litellm.served("canary") - before == 40, "40 mirrored copies")
    router.set_weight(0)
    before = litellm.served("canary")
    assert Counter(litellm.route(session_ids(40, seed=22))) == {"stable": 40}
    assert litellm.served("canary") == before


def test_a_weights_file_edited_into_garbage_keeps_the_weight_the_plugin_had(
    litellm: LiteLLMService,
) -> None:
    """The plugin keeps applying the last good weights and reports the file's problem; the
    driver's next write repairs the file."""
    router = litellm.router()
    router.set_weight(25)
    litellm.weights_path.write_text('{"model_group": "atlas-70b", "canary_weight": 250}')
    assert router.read_weight() == RouterState(25)
    router.set_weight(5)
    assert json.loads(litellm.weights_path.read_text())["canary_weight"] == 5
    assert router.read_weight() == RouterState(5)


def test_a_wrong_master_key_is_a_permanent_error_that_names_no_key(
    litellm: LiteLLMService,
) -> None:
    """A refused key stops with what to fix, and neither key appears in the message."""
    wrong = "sk-wrong-0c1d2e3f4a5b6c7d"
    with pytest.raises(PermanentError, match="refused rolloutd's master key") as refused:
        litellm.router(master_key=wrong).read_weight()
    assert wrong not in str(refused.value) and MASTER_KEY not in str(refused.value)


def test_the_master_key_is_never_in_the_proxys_log(litellm: LiteLLMService) -> None:
    """After the proxy has served and been read back, its log has no trace of the key."""
    litellm.router().set_weight(5)
    litellm.route(session_ids(10, seed=31))
    assert MASTER_KEY not in litellm.log.read_text(errors="replace")


def test_a_plugin_on_another_directory_fails_the_preflight(litellm: LiteLLMService) -> None:
    """A driver writing where the plugin does not read is refused with what to set."""
    elsewhere = litellm.directory / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    with pytest.raises(PermanentError, match="ROLLOUTD_LITELLM_WEIGHTS_DIR"):
        litellm.router(weights_path=elsewhere / f"{GROUP}.json").check()


def test_an_unknown_model_group_is_a_permanent_error(litellm: LiteLLMService) -> None:
    """A group the proxy does not serve is named with the groups it does."""
    with pytest.raises(PermanentError, match=r"no model group 'atlas-8b'.*atlas-70b"):
        litellm.router(model_group="atlas-8b").read_weight()


class DiesBeforeWrite:
    """The real driver, whose proxy is stopped right before the next weight write: it dies
    between the reconciler's read and its write."""

    def __init__(self, service: LiteLLMService) -> None:
        self.service = service
        self.router = service.router()
        self.armed = False

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        if self.armed:
            self.armed = False
            self.service.stop()
        self.router.set_weight(weight, mirror=mirror)

    def read_weight(self) -> RouterState:
        return self.router.read_weight()

    def check(self) -> None:
        self.router.check()


def test_the_proxy_down_is_a_temporary_error_backed_off_and_nothing_is_lost(
    store: StoreHandle, tmp_path: Path
) -> None:
    """The proxy dies before the 25% write: the write fails as temporary (an event, a
    back-off, nothing written, no key in any message), the proxy restarts on the 5% it had,
    and the change lands on a later tick."""
    service = LiteLLMService(tmp_path)
    try:
        service.start()
        router = DiesBeforeWrite(service)
        router.router.set_weight(0)
        h = Harness(store, router=router)
        assert h.tick() == "running"
        assert h.tick(seconds=5) == "running"
        assert router.read_weight() == RouterState(5)
        router.armed = True
        assert h.tick(hours=48) == "running"
        failed = [e for e in _event_payloads(h) if e[0] == "action_failed"]
        assert len(failed) == 1 and "does not answer" in failed[0][2], failed
        assert "next try in" in failed[0][2]
        assert json.loads(service.weights_path.read_text())["canary_weight"] == 5
        with pytest.raises(TemporaryError, match="does not answer"):
            router.read_weight()
        assert h.tick(seconds=1) == "running"  # still down: nothing sent, nothing lost
        service.start()
        assert router.read_weight() == RouterState(5)
        h.tick(minutes=10)
        assert router.read_weight() == RouterState(25)
        assert MASTER_KEY not in json.dumps(_event_payloads(h), default=str)
    finally:
        service.close()


def _event_payloads(h: Harness) -> list[Any]:
    from rolloutd.store import queries

    with h.store.sessions() as session:
        return [(e.kind, e.data, e.detail) for e in queries.list_events(session, h.rollout_id)]
