"""Fixtures of the broker tests: one real Kafka broker per test module (tests/broker/harness.py)."""

from __future__ import annotations

import os

import pytest

from . import harness


def pytest_ignore_collect(collection_path, config):
    """The differential campaign against Spark's Kafka source runs with the matching pair (make test runs it
    in .venv-spark-pair) or KLTOOL_PARITY_FULL=1; elsewhere it is not collected at all (no silent skips)."""
    if collection_path.name == "test_spark_kafka_campaign.py":
        from .test_spark_kafka_parity import FULL

        return not FULL
    return None


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/broker/" in item.nodeid.replace(os.sep, "/"):
            item.add_marker(pytest.mark.broker)
            item.add_marker(pytest.mark.slow)


def _need_broker(why: str | None = None):
    """Skip (fail under CI) when the broker cannot run here, or for WHY (a module's own missing piece)."""
    why = harness.missing() or why
    if why:
        if os.environ.get("CI"):  # .ci/run fetches the jars: a failed fetch must not turn these checks into skips
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def start_broker(tmp_path_factory):
    """A factory of started single-node KRaft brokers for this module: ``start_broker(extra_settings, *,
    workdir=None, extra_classpath=())`` formats one (in a fresh temporary directory unless WORKDIR), starts it
    and returns it; each is stopped (SIGTERM, else SIGKILL) at the module's teardown."""
    started: list[harness.Broker] = []

    def start(extra: dict[str, str] | None = None, *, workdir=None, extra_classpath=()) -> harness.Broker:
        _need_broker()
        b = harness.Broker(workdir or tmp_path_factory.mktemp("broker"), extra)
        b.extra_classpath.extend(extra_classpath)
        started.append(b)
        b.start()
        return b

    yield start
    for b in reversed(started):
        try:
            b.stop()
        finally:
            b.kill()


@pytest.fixture(scope="module")
def broker(start_broker):
    """A started single-node KRaft broker for this module (harness.Broker's settings); stopped at teardown."""
    return start_broker()


@pytest.fixture
def live(broker):
    """The module's broker, started again if an earlier test left it stopped or killed."""
    broker.ensure_running()
    return broker
