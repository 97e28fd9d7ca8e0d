"""The flow tests use the session's real Prefect server (tests/conftest.py `prefect_server`)."""

from __future__ import annotations

from tests.conftest import PrefectServer, stop

__all__ = ["PrefectServer", "stop"]
