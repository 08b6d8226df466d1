"""The NGINX split include: rendered whole, parsed back from its directives."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rolloutd.routers.nginx_conf import Names, Split, parse, parse_state, render
from tests.routers.services import find_binary

NAMES = Names("rolloutd_pool", "X-Session-Id", "atlas_stable", "atlas_canary")
EXAMPLES = Path(__file__).parents[2] / "config" / "nginx"


def test_every_weight_reads_back_from_its_rendering() -> None:
    """Render then parse gives back every whole percent 0-100, mirroring on and off."""
    for weight in range(101):
        for mirror in (False, True):
            assert parse(render(NAMES, Split(weight, mirror)), NAMES) == Split(weight, mirror)


def test_the_ends_leave_one_pool_out_entirely() -> None:
    """0% and 100% name only one upstream, so the other cannot get a session."""
    assert "atlas_canary" not in render(NAMES, Split(0, False)).split("split_clients")[1]
    assert "atlas_stable" not in render(NAMES, Split(100, False)).split("split_clients")[1]


def test_an_equivalent_hand_written_split_reads_back_its_share() -> None:
    """Read-back parses the directives, not rolloutd's comments: `75% stable; * canary` is 25%."""
    text = render(NAMES, Split(5, False)).replace(
        "    5%      atlas_canary;\n    *       atlas_stable;",
        "    75% atlas_stable;  # by hand\n    * atlas_canary;",
    )
    assert parse(text, NAMES) == Split(25, False)


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (("5%      atlas_canary", "5.5%    atlas_canary"), "not a whole percent"),
        (("5%      atlas_canary", "5%      other_pool"), "upstream 'other_pool'"),
        (("*       atlas_stable;", "90% atlas_stable;"), "add up to 95%"),
        (("default $http_x_session_id;", "default $http_x_user;"), "no `map"),
        (("default 0;", "default 2;"), "_mirror"),
        (("split_clients", "# split_clients"), "no `split_clients"),
    ],
)
def test_an_include_that_does_not_fit_is_refused_with_the_reason(
    edit: tuple[str, str], reason: str
) -> None:
    """Partial, foreign or hand-broken includes never read back as a weight."""
    text = render(NAMES, Split(5, False)).replace(*edit)
    with pytest.raises(ValueError, match=reason):
        parse(text, NAMES)


def test_an_include_for_another_header_is_refused() -> None:
    """A split rendered for X-User does not split by X-Session-Id."""
    other = Names("rolloutd_pool", "X-User", "atlas_stable", "atlas_canary")
    with pytest.raises(ValueError, match="not on the X-Session-Id header"):
        parse(render(other, Split(5, False)), NAMES)


def test_the_state_line_round_trips_and_rejects_anything_else() -> None:
    """The verify location's answer parses back; other bodies are refused."""
    assert parse_state(Split(25, True).state() + "\n") == Split(25, True)
    for body in ("weight=101 mirror=on", "<html>", "weight=5"):
        with pytest.raises(ValueError, match="expected"):
            parse_state(body)


def test_the_example_include_is_the_zero_percent_rendering() -> None:
    """config/nginx/rolloutd-split.conf is exactly what rolloutd writes at 0%."""
    assert (EXAMPLES / "rolloutd-split.conf").read_text() == render(NAMES, Split(0, False))


def test_the_example_site_passes_nginx_t_with_every_variable_wired(tmp_path: Path) -> None:
    """config/nginx/atlas-70b.conf, inside an http block, passes `nginx -t` and uses the split,
    mirror and state variables."""
    site = (EXAMPLES / "atlas-70b.conf").read_text()
    for variable in ("$rolloutd_pool;", "$rolloutd_pool_mirror", "$rolloutd_pool_state"):
        assert variable in site.split("include /etc/nginx/rolloutd")[1]
    (tmp_path / "site.conf").write_text(
        site.replace(
            "/etc/nginx/rolloutd/atlas-70b-split.conf", str(EXAMPLES / "rolloutd-split.conf")
        )
    )
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nevents {{}}\nhttp {{\n    include {tmp_path}/site.conf;\n}}\n"
    )
    command = [find_binary("nginx"), "-t", "-e", "stderr", "-p", str(tmp_path)]
    done = subprocess.run(
        [*command, "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
