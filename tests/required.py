"""What a test does when a real service or tool it needs is missing: it fails, saying how to
get it. A skip would let a machine without HAProxy, NGINX, Prometheus, systemd-analyze or
Postgres pass the suite; ``bash .ci/run`` installs and starts every one of them."""

from __future__ import annotations

from typing import NoReturn

import pytest


def missing(what: str, remedy: str) -> NoReturn:
    """Fail the test: ``what`` is missing, and ``remedy`` brings it."""
    pytest.fail(f"{what}: {remedy}", pytrace=False)
