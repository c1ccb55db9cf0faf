"""Issue 22 part 3: a real Kafka 4.x broker with tiered storage (KIP-405) enabled, Kafka's LocalTieredStorage
(the storage module's test jar) and the topic-based metadata manager. Segments roll every second, are copied
to the tiered root and deleted locally (local.retention.ms); kltool then reads the tiered root and the log
dir together, and the union must equal what a consumer reads from offset 0."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from kafka import KafkaProducer

from ..conftest import run_kltool
from . import harness
from .conftest import _need_broker

TOPIC = "tiered"


def _shim_jar(scratch: Path) -> str:
    """tests/broker/shim's classes, compiled once into a jar cached beside the jars (keyed by the sources): a
    class path of jars only can have a CDS archive (harness.jvm_options). Compiled into SCRATCH, a class
    directory, when the cache cannot be written."""
    src = sorted((harness.HERE / "shim").rglob("*.java"))
    key = hashlib.sha256(b"".join(p.read_bytes() for p in src)).hexdigest()[:16]
    jar = Path(str(harness.jar_dir()) + "-cds") / f"shim-{key}.jar"
    if jar.is_file():
        return str(jar)
    subprocess.run(["javac", "-nowarn", "-d", str(scratch), "-cp", harness.classpath(), *map(str, src)], check=True,
                   capture_output=True, timeout=120)
    try:
        jar.parent.mkdir(parents=True, exist_ok=True)
        tmp = jar.with_name(f"{jar.name}.{os.getpid()}.part")
        with zipfile.ZipFile(tmp, "w") as z:
            for f in sorted(scratch.rglob("*.class")):
                z.write(f, f.relative_to(scratch).as_posix())
        os.replace(tmp, jar)
    except OSError:
        return str(scratch)
    return str(jar)


@pytest.fixture(scope="module")
def tiered_broker(start_broker, tmp_path_factory):
    tiered_jars = sorted(harness.tiered_jar_dir().glob("kafka-storage-*-test.jar"))
    _need_broker(None if tiered_jars else (f"no kafka-storage test jar (LocalTieredStorage) in "
                                           f"{harness.tiered_jar_dir()}: `make broker-jars` fetches it"))
    work = tmp_path_factory.mktemp("tiered-broker")
    remote = work / "remote"
    remote.mkdir()
    shim = _shim_jar(work / "shim")
    b = start_broker({
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
        "remote.log.storage.manager.impl.prefix": "rsm.config.",
        "rsm.config.dir": str(remote),
        "rsm.config.delete.on.close": "false",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
        "log.initial.task.delay.ms": "1000",  # the first retention check (local deletion) comes 30 s after start-up by default
    }, workdir=work, extra_classpath=[shim, *map(str, tiered_jars)])
    b.remote = remote
    return b


def _tiered_logs(root):
    return sorted(p.name for p in root.rglob("*.log"))


def test_union_of_tiered_and_local_equals_a_consumer(tiered_broker):
    b = tiered_broker
    b.create_topic(TOPIC, 1, {"remote.storage.enable": "true", "segment.ms": "500", "local.retention.ms": "1000",
                              "retention.ms": "-1", "index.interval.bytes": "256",
                              "file.delete.delay.ms": "0"})
    prod = KafkaProducer(**b.kafka_python_args(), acks=1, linger_ms=5, compression_type="gzip")
    for wave in range(6):
        for i in range(50):
            prod.send(TOPIC, key=f"k{i % 7}".encode(), value=f"wave {wave} record {i} ".encode() * (1 + i % 5))
        prod.flush()
        time.sleep(0.8)
    prod.close()
    pdir = b.partition_dir(TOPIC, 0)
    t0 = time.monotonic()
    while True:  # wait for segments in the tiered root and gone from the log dir
        local = sorted(p.name for p in pdir.glob("*.log"))
        remote = _tiered_logs(b.remote)
        if remote and local and int(local[0][:20]) > 0:
            break
        assert time.monotonic() - t0 < 120, (local, remote, b.log_text()[-3000:])
        time.sleep(0.3)
    expected = [(r.offset, r.key, r.value) for r in b.consume_all(TOPIC, 0)]
    assert len(expected) == 300
    b.stop()

    res = run_kltool("--json", "dump", "--records", "--encoding", "base64", str(b.logdir), str(b.remote),
                     "--topic", TOPIC)
    assert res.code == 0, res
    import base64

    got = [(r["offset"], base64.b64decode(r["key"]["base64"]), base64.b64decode(r["value"]["base64"]))
           for r in res.json() if r["type"] == "record"]
    assert got == expected
    res = run_kltool("verify", "--topic", TOPIC, str(b.logdir), str(b.remote))
    assert res.code == 0 and "WARNING" not in res.out, res
    info = run_kltool("--json", "info", str(b.logdir), str(b.remote), "--topic", TOPIC).json()
    assert info[0]["log_start_offset"] == 0 and info[0]["log_end_offset"] == 300, info
    # the log dir alone no longer holds offset 0: the tiered root is what completes it
    alone = run_kltool("--json", "info", str(b.logdir), "--topic", TOPIC).json()
    assert alone[0]["log_end_offset"] == 300 and alone[0]["segments"] < info[0]["segments"]


def test_spark_reader_reads_the_union(tiered_broker):
    pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    import json

    from ..test_spark_datasource import read_all, rows_of

    b = tiered_broker
    rows = rows_of(read_all({"paths": json.dumps([str(b.logdir), str(b.remote)]), "topic": TOPIC}))
    assert [r[2] for r in rows] == list(range(300))
