"""Plans that name the HAProxy, NGINX or LiteLLM driver get it, built from the plan's fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutd.drivers import PlanDrivers
from rolloutd.errors import PermanentError
from rolloutd.planfile import parse_plan
from rolloutd.routers.haproxy import HAProxyRouter
from rolloutd.routers.litellm_proxy import LiteLLMRouter
from rolloutd.routers.nginx import NginxRouter
from rolloutd.routers.nginx_conf import Split

EXAMPLE = Path(__file__).parents[2] / "config" / "plans" / "atlas-70b-maxseq8192.yaml"


def _plan_with_router(router: dict[str, Any]) -> Any:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["router"] = router
    return parse_plan(yaml.safe_dump(data), source="plan.yaml").plan


def test_the_example_plan_gets_an_haproxy_driver_for_its_backend() -> None:
    """The reference plan's router section builds an HAProxy driver with its pools."""
    router = PlanDrivers().router(1, parse_plan(EXAMPLE.read_text()).plan)
    assert isinstance(router, HAProxyRouter)
    assert (router.backend, router.stable, router.canary) == (
        "atlas_70b",
        ["gpu-a", "gpu-b", "gpu-c"],
        ["gpu-d"],
    )


def test_an_nginx_plan_gets_an_nginx_driver_with_its_paths() -> None:
    """Every nginx field of the plan reaches the driver."""
    plan = _plan_with_router(
        {
            "driver": "nginx",
            "include_path": "/etc/nginx/conf.d/atlas-split.conf",
            "upstreams": {"stable": "atlas_stable", "canary": "atlas_canary"},
            "pid_file": "/run/nginx.pid",
            "command_prefix": ["sudo", "-n"],
            "verify_url": "http://127.0.0.1/.rolloutd/state",
        }
    )
    router = PlanDrivers().router(1, plan)
    assert isinstance(router, NginxRouter)
    assert router.names.canary == "atlas_canary"
    assert router._command[:3] == ["sudo", "-n", "nginx"]
    assert Split(0, False).state() == "weight=0 mirror=off"


def test_an_unusable_haproxy_socket_is_a_permanent_error() -> None:
    """A socket that is neither a path nor host:port stops the rollout with its name."""
    plan = _plan_with_router(
        {
            "driver": "haproxy",
            "socket": "admin.sock",
            "backend": "atlas_70b",
            "servers": {"stable": ["gpu-a"], "canary": ["gpu-d"]},
        }
    )
    with pytest.raises(PermanentError, match=r"admin\.sock"):
        PlanDrivers().router(1, plan)


def test_a_rollouts_drivers_are_built_once_until_its_plan_changes_or_it_is_forgotten() -> None:
    drivers = PlanDrivers()
    plan = parse_plan(EXAMPLE.read_text()).plan
    router, metrics = drivers.router(1, plan), drivers.metrics(1, plan)
    for _ in range(100):
        assert drivers.router(1, plan) is router
        assert drivers.metrics(1, plan) is metrics
    assert drivers.router(2, plan) is not router  # another rollout, its own
    same = parse_plan(EXAMPLE.read_text()).plan  # an equal plan, parsed again
    assert drivers.router(1, same) is router
    changed = _plan_with_router({**plan.router.model_dump(), "backend": "atlas_70b_b"})
    rebuilt = drivers.router(1, changed)
    assert rebuilt is not router and rebuilt.backend == "atlas_70b_b"  # type: ignore[attr-defined]
    drivers.forget(1)
    assert drivers.router(1, changed) is not rebuilt
    assert drivers.metrics(1, changed) is not metrics


LITELLM = {
    "driver": "litellm",
    "weights_path": "/var/lib/rolloutd/litellm/atlas-70b.json",
    "model_group": "atlas-70b",
    "state_url": "http://127.0.0.1:4000/rolloutd/weights",
    "master_key_env": "ROLLOUTD_TEST_LITELLM_KEY",
}


def test_a_litellm_plan_with_a_mirrored_shadow_step_is_valid_and_gets_its_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference plan naming ``driver: litellm`` validates, mirrored shadow step and all
    (LiteLLM mirrors), and builds a driver with the group, paths and the key from the
    environment, which the driver never shows."""
    monkeypatch.setenv("ROLLOUTD_TEST_LITELLM_KEY", "sk-plan-test-91b2c3d4e5")
    data = yaml.safe_load(EXAMPLE.read_text())
    data["router"] = LITELLM
    shadow = [i for i, step in enumerate(data["steps"]) if step["kind"] == "shadow"]
    assert shadow
    data["steps"][shadow[0]]["mirror"] = True
    plan = parse_plan(yaml.safe_dump(data), source="plan.yaml").plan
    router = PlanDrivers().router(1, plan)
    assert isinstance(router, LiteLLMRouter)
    assert (router.model_group, str(router.weights_path)) == ("atlas-70b", LITELLM["weights_path"])
    assert "sk-plan-test" not in repr(router) and "sk-plan-test" not in str(vars(router).keys())


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("state_url", "not a url", "router.state_url"),
        ("model_group", "", "router.model_group"),
        ("master_key_env", "sk-the-key-itself!", "router.master_key_env"),
    ],
)
def test_a_bad_litellm_router_section_names_its_field(field: str, value: str, named: str) -> None:
    """A broken litellm section is refused with the file and the field."""
    from rolloutd.errors import BadInput

    data = yaml.safe_load(EXAMPLE.read_text())
    data["router"] = {**LITELLM, field: value}
    with pytest.raises(BadInput) as refused:
        parse_plan(yaml.safe_dump(data), source="plan.yaml")
    assert named in str(refused.value) and "plan.yaml" in str(refused.value)
    assert "sk-the-key-itself" not in str(refused.value)
