"""Fixtures of the broker tests: one real Kafka broker per test module (tests/broker/harness.py)."""

from __future__ import annotations

import os

import pytest

from . import harness


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/broker/" in item.nodeid.replace(os.sep, "/"):
            item.add_marker(pytest.mark.broker)
            item.add_marker(pytest.mark.slow)


def _need_broker():
    why = harness.missing()
    if why:
        if os.environ.get("CI"):  # .ci/run fetches the jars: a failed fetch must not turn these checks into skips
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A started single-node KRaft broker for this module; stopped (SIGTERM, else SIGKILL) at teardown."""
    _need_broker()
    b = harness.Broker(tmp_path_factory.mktemp("broker"))
    try:
        b.start()
        yield b
    finally:
        try:
            b.stop()
        finally:
            b.kill()


@pytest.fixture
def live(broker):
    """The module's broker, started again if an earlier test left it stopped or killed."""
    broker.ensure_running()
    return broker
