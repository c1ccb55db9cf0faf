"""An S3 server on loopback (moto's) for the tests that read object storage."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def s3_server() -> Iterator[tuple[object, dict[str, str]]]:
    """A moto S3 server on 127.0.0.1 while the block runs: (a pyarrow S3FileSystem on it that may create buckets,
    the storage options that reach it: endpoint_override, access_key, secret_key, region). Skips the test
    when moto or pyarrow is missing."""
    server_mod = pytest.importorskip("moto.server")
    pafs = pytest.importorskip("pyarrow.fs")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        port = server._server.server_port
        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="testing",
                               secret_key="testing", region="us-east-1", allow_bucket_creation=True)
        yield fs, {"endpoint_override": f"http://127.0.0.1:{port}", "access_key": "testing", "secret_key": "testing",
                   "region": "us-east-1"}
    finally:
        server.stop()


def storage(opts: dict) -> dict:
    """Storage options as the kafka-log source takes them (``storage.`` before each)."""
    return {f"storage.{k}": v for k, v in opts.items()}
