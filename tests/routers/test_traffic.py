"""Real requests through real HAProxy and NGINX: the split is by session, sticky, and exact
at the ends.

2,000 distinct session ids go through each proxy at 0%, 5%, 25% and 100% (once per module,
shared by the tests below); each request is answered by the stable or the canary pool.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest

from tests.routers.services import (
    HAProxyService,
    NginxService,
    Pools,
    binomial_interval,
    route,
    session_ids,
    wait_for,
)

SESSIONS = session_ids(2000)
LADDER = (0, 5, 25, 100)


@dataclass
class Ladder:
    """Which pool answered each of the 2,000 sessions at each weight, on one proxy."""

    driver: str
    service: HAProxyService | NginxService
    answers: dict[int, list[str]]

    def canary(self, weight: int) -> set[str]:
        """The sessions the canary answered at ``weight``."""
        return {
            s for s, pool in zip(SESSIONS, self.answers[weight], strict=True) if pool == "canary"
        }


@pytest.fixture(scope="module", params=["haproxy", "nginx"])
def ladder(request: pytest.FixtureRequest) -> Ladder:
    """Route all sessions at 0, 5, 25 and 100% (raising the weight step by step)."""
    service = request.getfixturevalue(f"{request.param}_service")
    router = service.router()
    answers = {}
    for weight in LADDER:
        router.set_weight(weight)
        assert router.read_weight().weight == weight
        answers[weight] = route(service.port, SESSIONS)
    router.set_weight(0)
    return Ladder(request.param, service, answers)


@pytest.mark.parametrize("weight", [5, 25])
def test_the_canary_gets_its_binomial_share_of_2000_sessions(ladder: Ladder, weight: int) -> None:
    """At 5% and 25% the canary's count of 2,000 sessions is inside the 99.9% binomial range."""
    low, high = binomial_interval(len(SESSIONS), weight / 100)
    counts = Counter(ladder.answers[weight])
    assert set(counts) == {"stable", "canary"}
    assert low <= counts["canary"] <= high, f"{ladder.driver}: {counts} not in [{low}, {high}]"


def test_at_0_percent_no_session_reaches_the_canary(ladder: Ladder) -> None:
    """Weight 0 is exact: all 2,000 sessions are answered by stable."""
    assert Counter(ladder.answers[0]) == {"stable": len(SESSIONS)}


def test_at_100_percent_no_session_reaches_stable(ladder: Ladder) -> None:
    """Weight 100 is exact: all 2,000 sessions are answered by the canary."""
    assert Counter(ladder.answers[100]) == {"canary": len(SESSIONS)}


def test_raising_the_weight_moves_only_stable_sessions_to_the_canary(ladder: Ladder) -> None:
    """Every session on the canary at 5% is still there at 25% (and at 100%): none moves back."""
    at_5, at_25 = ladder.canary(5), ladder.canary(25)
    assert at_5 and at_5 <= at_25
    assert at_25 <= ladder.canary(100)
    assert not ladder.canary(0)


def test_a_session_reaches_the_same_pool_for_50_requests(ladder: Ladder, pools: Pools) -> None:
    """Fifty requests of each of 20 sessions, interleaved on shared connections, keep
    to one pool."""
    router = ladder.service.router()
    router.set_weight(25)
    chosen = sorted(ladder.canary(25))[:10] + sorted(set(SESSIONS) - ladder.canary(25))[:10]
    sessions = chosen * 50
    seen: dict[str, set[str]] = defaultdict(set)
    for session, pool in zip(sessions, route(ladder.service.port, sessions), strict=True):
        seen[session].add(pool)
    router.set_weight(0)
    assert all(len(pools_seen) == 1 for pools_seen in seen.values()), seen
    assert {next(iter(seen[s])) for s in chosen[:10]} == {"canary"}


def test_no_canary_session_moves_to_stable_while_the_weight_changes(ladder: Ladder) -> None:
    """Canary sessions keep reaching the canary during the change from 5% to 25%."""
    router = ladder.service.router()
    router.set_weight(5)
    on_canary = sorted(ladder.canary(5))
    answers: list[str] = []
    done = threading.Event()

    def keep_asking() -> None:
        while not done.is_set():
            answers.extend(route(ladder.service.port, on_canary, connections=2))

    asker = threading.Thread(target=keep_asking)
    asker.start()
    wait_for(lambda: len(answers) >= len(on_canary), "traffic before the change")
    router.set_weight(25)
    sent_before = len(answers)
    wait_for(lambda: len(answers) >= sent_before + len(on_canary), "traffic after the change")
    done.set()
    asker.join()
    router.set_weight(0)
    assert Counter(answers) == {"canary": len(answers)}


def test_requests_without_the_header_are_split_by_weight(ladder: Ladder) -> None:
    """Header-less requests are spread per request at about the weight (HAProxy: round robin
    by weight; NGINX: hashed $request_id), so the canary still gets its share of them."""
    router = ladder.service.router()
    router.set_weight(25)
    answers = Counter(route(ladder.service.port, [None] * 600))
    router.set_weight(0)
    low, high = binomial_interval(600, 0.25)
    assert low <= answers["canary"] <= high, answers


def test_a_shadow_step_copies_requests_to_the_canary_but_answers_from_stable(
    nginx_service: NginxService, pools: Pools
) -> None:
    """With mirroring on, stable answers every request and the canary receives a copy of each;
    with it off, the canary receives nothing."""
    router = nginx_service.router()
    shadowed, after = session_ids(100, seed=7), session_ids(100, seed=8)
    router.set_weight(0, mirror=True)
    assert Counter(route(nginx_service.port, shadowed)) == {"stable": 100}
    wait_for(lambda: all(pools.canary.mirrored[s] == 1 for s in shadowed), "mirrored copies")
    router.set_weight(0)
    assert Counter(route(nginx_service.port, after)) == {"stable": 100}
    assert not any(pools.canary.mirrored[s] for s in after)
    assert not any(pools.canary.hits[s] for s in shadowed + after)
