"""A differential campaign: kltool's ``kafka-log`` against Spark's own Kafka source over a matrix of options.

tests/broker/test_spark_kafka_parity.py compares hand-picked cases; this module draws combinations of options
with a fixed seed (SEED) and compares every one: one broker (127.0.0.1) writes topics with every codec, several
partitions and segments, headers (none, null values, empty keys and values, repeated keys), null and empty
keys and values, an idempotent producer, committed and aborted transactions, lines of Kafka's console
producer with null header values (its ``null.marker``), and a compacted topic the broker's cleaner has
cleaned. One Spark session reads each combination through ``format("kafka")`` while the broker runs, then
through ``format("kafka-log")`` on the stopped broker's log dir. Rows must be identical (sorted by topic,
partition and offset); where Spark fails, kltool must fail with the same kind of error (``_kind``). README's
deliberate differences (a start at latest, an end at earliest) are not drawn: the parity module pins them.

The options drawn: subscribe / subscribePattern / assign; startingOffsets and endingOffsets (earliest/latest,
JSON with -2/-1, offsets within and past the end, maps missing a partition); startingTimestamp/endingTimestamp
and startingOffsetsByTimestamp/endingOffsetsByTimestamp (a timestamp before, among, and after every record,
-1/-2, maps missing a partition), startingOffsetsByTimestampStrategy; includeHeaders; kafka.isolation.level;
failOnDataLoss; minPartitions. Then each of ODDITIES (what Spark checks before it reads: option values,
consumer settings it refuses, an empty or unknown subscription) on a drawn combination, and PAST_END (an
offset past a partition's end, each way, with failOnDataLoss both ways). Runs with the matching pair (pyspark = the Kafka source jars' version,
``make test``'s .venv-spark-pair), else with KLTOOL_PARITY_FULL=1; KLTOOL_CAMPAIGN_LOG=FILE writes each
combination's outcomes there.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time

import pytest

from . import harness
from . import test_spark_kafka_parity as parity
from .conftest import _need_broker

SEED = 20261126
COMBOS = 70
PARTS = 3
PER_PART = 60
BASE_TS = (int(time.time()) - 3600) * 1000
STEP_MS = 100
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TOPIC_CONFIG = {"segment.ms": "1000", "index.interval.bytes": "256"}
AFTER_ALL = BASE_TS + 7 * 24 * 3600 * 1000  # after every record and every marker (stamped by the broker's clock)



def _ts(i: int) -> int:
    return BASE_TS + i * STEP_MS


def _record(i: int, tag: str):
    """Keys null, empty or not; values null, empty or not; headers none, a null value, empty and repeated."""
    key = (None, b"", f"{tag}-k{i % 9}".encode())[i % 3 if i % 5 else 2]
    value = None if i % 13 == 0 else b"" if i % 13 == 1 else f"{tag}-v{i}".encode() * (1 + i % 3)
    headers = [[], [("a", b"1"), ("a", b"")], [("", b"x")], [("h", f"{i}".encode())]][i % 4]
    if key is None and value is None:  # (kafka-python refuses to send neither)
        key = b""
    return key, value, headers


def _producer(b, **kw):
    from kafka import KafkaProducer

    return KafkaProducer(**b.kafka_python_args(), **kw)


def _produce_codecs(b):
    for codec in CODECS:
        topic = f"cg-{codec}"
        b.create_topic(topic, PARTS, TOPIC_CONFIG)
        prod = _producer(b, compression_type=None if codec == "none" else codec, acks=1, linger_ms=20,
                         batch_size=1024, enable_idempotence=False)
        for wave in range(2):
            for p in range(PARTS):
                for i in range(wave * PER_PART // 2, (wave + 1) * PER_PART // 2):
                    key, value, headers = _record(i, f"{topic}{p}")
                    prod.send(topic, key=key, value=value, headers=headers, partition=p, timestamp_ms=_ts(i))
            prod.flush()
            if wave == 0:
                time.sleep(1.2)  # past segment.ms: the second wave starts a new segment
        prod.close()


def _produce_idempotent(b):
    b.create_topic("cg-idem", 2, TOPIC_CONFIG)
    prod = _producer(b, compression_type="zstd", acks="all", enable_idempotence=True, linger_ms=5)
    for i in range(PER_PART):
        for p in range(2):
            key, value, headers = _record(i, f"idem{p}")
            prod.send("cg-idem", key=key, value=value, headers=headers, partition=p, timestamp_ms=_ts(i))
        if i % 10 == 9:
            prod.flush()
    prod.close()


def _produce_txn(b):
    b.create_topic("cg-txn", PARTS, TOPIC_CONFIG)
    parity.produce_transactions(b, "cg-txn", txn_id="kltool-campaign", codec="snappy",
                                outcomes=["commit", "abort", "commit", "commit", "abort", "commit"], rounds=8,
                                record=_record, ts=_ts, parts=PARTS)


def _produce_console(b):
    """Kafka's own console producer: header values null (its null.marker), keys and values null too."""
    b.create_topic("cg-console", 1, TOPIC_CONFIG)
    lines = []
    for i in range(30):
        hdr = ["h:NULL", "h:NULL,g:v", "a:1,a:NULL", "k:"][i % 4]
        key = "NULL" if i % 6 == 0 else f"k{i % 4}"
        value = "NULL" if i % 7 == 0 else f"v{i}"
        lines.append(f"{hdr}\t{key}\t{value}")
    cp = harness.classpath()
    opts, _ = harness.jvm_options(cp)
    opts = [o for o in opts if not o.startswith("-XX:ArchiveClassesAtExit=")]
    cmd = ["java", "-Xmx256m", *opts, "-cp", cp,
           f"-Dlog4j2.configurationFile={harness.HERE / 'log4j2-tools.xml'}", "org.apache.kafka.tools.ConsoleProducer",
           "--bootstrap-server", b.bootstrap, "--topic", "cg-console", "--compression-codec", "lz4",
           "--property", "parse.headers=true", "--property", "parse.key=true", "--property", "null.marker=NULL"]
    p = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


CLEANED_BY = 240


def _produce_compacted(b) -> str | None:
    """A compacted topic the cleaner has cleaned (as parity._produce_compacted, two partitions)."""
    b.create_topic("cg-compact", 2, {"cleanup.policy": "compact", "segment.ms": "300",
                                     "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                                     "delete.retention.ms": "0"})
    prod = _producer(b, compression_type="gzip", acks=1, linger_ms=5, enable_idempotence=False)
    for wave in range(3):
        for p in range(2):
            for i in range(30):
                value = None if (wave == 2 and i % 5 == 0) else f"w{wave}-{i}".encode()
                prod.send("cg-compact", key=f"k{i % 7}".encode(), value=value, partition=p,
                          headers=[("w", str(wave).encode())], timestamp_ms=_ts(wave * 30 + i))
        prod.flush()
    for p in range(2):
        prod.send("cg-compact", key=b"tick", value=b"t", partition=p, timestamp_ms=_ts(200))
    prod.flush()
    prod.close()
    cp = b.logdir / "cleaner-offset-checkpoint"
    t0 = time.monotonic()
    while time.monotonic() - t0 < CLEANED_BY:
        got = parity._checkpoint(cp)
        if all(got.get(("cg-compact", p), 0) >= 90 for p in range(2)):
            return None
        time.sleep(0.5)
    return f"the cleaner did not clean cg-compact within {CLEANED_BY} s ({parity._checkpoint(cp)})"


def _layout(b) -> dict[str, dict[int, tuple[int, int]]]:
    """{topic: {partition: (log start offset, log end offset)}} as the broker answers ListOffsets."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(**b.kafka_python_args())
    try:
        tps = [TopicPartition(t, p) for t in c.topics() if t.startswith("cg-")
               for p in sorted(c.partitions_for_topic(t))]
        first, end = c.beginning_offsets(tps), c.end_offsets(tps)
    finally:
        c.close()
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for tp in tps:
        out.setdefault(tp.topic, {})[tp.partition] = (first[tp], end[tp])
    return out


# -- the matrix ---------------------------------------------------------------------------------------------

def _subscription(rng, topics: list[str], layout) -> tuple[dict, dict[str, list[int]]]:
    """One of subscribe / subscribePattern / assign, and the partitions it reads."""
    how = rng.choice(["subscribe", "subscribe", "pattern", "assign"])
    if how == "assign":
        t = rng.choice(topics)
        ps = sorted(rng.sample(sorted(layout[t]), rng.randint(1, len(layout[t]))))
        return {"assign": json.dumps({t: ps})}, {t: ps}
    if how == "pattern":
        pat = rng.choice(["cg-(lz4|zstd)", "cg-.*", "cg-(txn|idem)", "cg-co.*"])
        chosen = [t for t in topics if re.fullmatch(pat, t)]
        return {"subscribePattern": pat}, {t: sorted(layout[t]) for t in chosen}
    chosen = sorted(rng.sample(topics, rng.randint(1, 2)))
    return {"subscribe": ",".join(chosen)}, {t: sorted(layout[t]) for t in chosen}


def _timestamp(rng) -> int:
    return rng.choice([_ts(rng.randint(0, PER_PART)), _ts(rng.randint(0, PER_PART)) + 50, _ts(-50), AFTER_ALL,
                       _ts(rng.randint(0, PER_PART))])


def _offset_map(rng, read, layout, is_start: bool) -> dict:
    """A JSON of offsets: -2 / -1 (start: -2 only; end: -1 only: the other is README's documented difference),
    an offset within the log, one past its end; sometimes missing a partition (Spark's assertion)."""
    out = {}
    for t, ps in read.items():
        for p in ps:
            lo, hi = layout[t][p]
            v = rng.choice([-2 if is_start else -1, rng.randint(lo, max(lo, hi)), rng.randint(lo, max(lo, hi)),
                            hi + 1000 if rng.random() < 0.3 else rng.randint(lo, max(lo, hi))])
            out.setdefault(t, {})[str(p)] = v
    if rng.random() < 0.12:
        t = rng.choice(sorted(out))
        if len(out[t]) > 1:
            out[t].pop(rng.choice(sorted(out[t])))
    return out


def _time_map(rng, read) -> dict:
    out = {}
    for t, ps in read.items():
        for p in ps:
            out.setdefault(t, {})[str(p)] = rng.choice([_timestamp(rng), _timestamp(rng), -2, -1])
    if rng.random() < 0.1:
        t = rng.choice(sorted(out))
        if len(out[t]) > 1:
            out[t].pop(rng.choice(sorted(out[t])))
    return out


def _bound(rng, opts, read, layout, side: str, named: str) -> str:
    """One side of the read (``side``: starting or ending): none, ``named``, offsets JSON, a timestamp or
    timestamps by partition, drawn and set in ``opts``; the kind drawn."""
    kind = rng.choice(["none", "none", named, "json", "json", "timestamp", "by-timestamp"])
    if kind == named:
        opts[f"{side}Offsets"] = named
    elif kind == "json":
        opts[f"{side}Offsets"] = json.dumps(_offset_map(rng, read, layout, side == "starting"))
    elif kind == "timestamp":
        opts[f"{side}Timestamp"] = str(_timestamp(rng))
    elif kind == "by-timestamp":
        opts[f"{side}OffsetsByTimestamp"] = json.dumps(_time_map(rng, read))
    return kind


def _combo(rng, topics, layout) -> dict:
    opts, read = _subscription(rng, topics, layout)
    start = _bound(rng, opts, read, layout, "starting", "earliest")
    if start in ("timestamp", "by-timestamp") and rng.random() < 0.5:
        opts["startingOffsetsByTimestampStrategy"] = rng.choice(["error", "latest"])
    _bound(rng, opts, read, layout, "ending", "latest")
    if rng.random() < 0.5:
        opts["includeHeaders"] = "true" if rng.random() < 0.8 else "false"
    if rng.random() < 0.6:
        opts["kafka.isolation.level"] = rng.choice(["read_committed", "read_uncommitted"])
    if rng.random() < 0.4:
        opts["failOnDataLoss"] = rng.choice(["true", "false"])
    if rng.random() < 0.3:
        opts["minPartitions"] = str(rng.choice([1, 4, 13]))
    return opts


# What a job may say that Spark's Kafka source checks before reading (its validateGeneralOptions, the cases of
# its option values), one per drawn combination.
ODDITIES = [
    ("minPartitions", "0"), ("minPartitions", "-2"), ("maxRecordsPerPartition", "7"), ("maxRecordsPerPartition", "0"),
    ("kafka.auto.offset.reset", "earliest"), ("kafka.enable.auto.commit", "true"),
    ("kafka.value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer"),
    ("startingOffsets", " EARLIEST "), ("endingOffsets", "Latest"), ("kafka.isolation.level", "READ_COMMITTED"),
    ("startingOffsetsByTimestampStrategy", "LATEST"), ("includeHeaders", "TRUE"), ("failOnDataLoss", "False"),
    ("subscribe", " , "), ("subscribePattern", " "), ("assign", "[]"), ("subscribe", "cg-none,cg-nope"),
    ("subscribePattern", "nomatch.*"),
]


def _oddity(opts: dict, key: str, value: str) -> dict:
    opts = dict(opts)
    if key in ("subscribe", "subscribePattern", "assign"):
        for k in ("subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
                  "startingOffsetsByTimestamp", "endingOffsetsByTimestamp"):
            opts.pop(k, None)
    opts[key] = value
    return opts


def combos(layout) -> dict[str, dict]:
    """COMBOS combinations drawn with SEED (c00...), then each oddity on a drawn one (o00...)."""
    rng = random.Random(SEED)
    topics = sorted(layout)
    out = {f"c{i:02d}": _combo(rng, topics, layout) for i in range(COMBOS)}
    for i, (key, value) in enumerate(ODDITIES):
        out[f"o{i:02d}"] = _oddity(_combo(rng, topics, layout), key, value)
    # an offset past a partition's end, each way (Spark finds an ending one as it reads)
    for i, (topic, which, fail, iso) in enumerate(PAST_END):
        offsets = {str(p): (hi + 1000 if p == 1 else -2 if which == "startingOffsets" else -1)
                   for p, (_lo, hi) in sorted(layout[topic].items())}
        out[f"p{i:02d}"] = {"subscribe": topic, which: json.dumps({topic: offsets}), "failOnDataLoss": fail,
                            "kafka.isolation.level": iso}
    return out


PAST_END = [(t, w, f, i) for t in ("cg-gzip", "cg-txn") for w in ("startingOffsets", "endingOffsets")
            for f in ("true", "false") for i in (["read_committed"] if t == "cg-txn" else ["read_uncommitted"])]


# -- the comparison -----------------------------------------------------------------------------------------

# Each side's error, as a kind: Spark's message (its first line) and kltool's one line.
KINDS = [
    ("no-offset-for-time", r"No offset matched from request|no offset matches starting"),
    ("partitions-not-named", r"assertion failed.*(specified|partitions)|the partitions read are|"
                             r"don't match what are assigned"),
    ("invalid-config", r"Invalid value .* for configuration"),
    ("start-after-end", r"start offset.*(larger|greater|after)|after (its|the) (resolved )?end|"
                        r"starting offset .* > |startingOffsets? .* after"),
    ("past-the-end", r"past (the|its) (log )?end|Some data may have been lost|OffsetOutOfRange"),
    ("not-positive", r"must be positive"),
    ("refused-kafka-option", r"Kafka option '[\w.]+' is not supported"),
    ("unknown-topic", r"UnknownTopicOrPartitionException"),
    ("empty-subscription", r"No topic ?partitions to assign|No topics to subscribe|pattern to subscribe is empty"),
]


def _kind(message: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, message, re.I):
            return kind
    return "other"


_JAVA_ERROR = re.compile(r"^(?:Caused by: |: )?((?:[\w$]+\.)+[\w$]*(?:Exception|Error)): (.+)$", re.M)


def _outcome(make_df, headers: bool):
    """("rows", rows) or ("error", the error's message): a Java exception's (its first ``X.YException: ...``
    line: Py4J's own first line names only the call), else the first line."""
    try:
        return ("rows", parity._collect(make_df(), headers))
    except Exception as e:  # noqa: BLE001 (both sources' errors reach Python as Py4J/Spark exceptions)
        text = str(e)
        m = _JAVA_ERROR.search(text)
        first = f"{m.group(1)}: {m.group(2)}" if m else next((ln for ln in text.splitlines() if ln.strip()), "")
        return ("error", first[:600])


@pytest.fixture(scope="module")
def campaign(start_broker, tmp_path_factory):
    _need_broker()
    jars = parity.spark_kafka_jars()
    from kltool.spark import session

    b = start_broker({"log.cleaner.backoff.ms": "300"}, workdir=tmp_path_factory.mktemp("campaign-broker"))
    spark = None
    try:
        t0 = time.monotonic()
        _produce_codecs(b)
        _produce_idempotent(b)
        _produce_txn(b)
        _produce_console(b)
        not_compacted = _produce_compacted(b)
        layout = _layout(b)
        produced = time.monotonic() - t0
        cases = combos(layout)
        spark = session("local[2]", "kltool-campaign", conf={
            "spark.jars": ",".join(jars), "spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false"})
        got_spark = {}
        progress = os.environ.get("KLTOOL_CAMPAIGN_LOG")
        for name, opts in cases.items():
            def make(opts=opts):
                # (a poll timeout of 5 s, not 120: an endingOffsets past the end with failOnDataLoss=false waits
                # that long for records that never come, then reads to the end)
                return (spark.read.format("kafka").option("kafka.bootstrap.servers", b.bootstrap)
                        .option("kafkaConsumer.pollTimeoutMs", "5000").options(**opts).load())
            t1 = time.monotonic()
            got_spark[name] = _outcome(make, opts.get("includeHeaders") == "true")
            if progress:
                with open(progress + ".progress", "a") as f:
                    f.write(f"{name} {time.monotonic() - t1:.1f} s {got_spark[name][0]} {json.dumps(opts)}\n")
        b.stop()
        got = {}
        for name, opts in cases.items():
            def make(opts=opts):
                return spark.read.format("kafka-log").option("path", str(b.logdir)).options(**opts).load()
            got[name] = (got_spark[name], _outcome(make, opts.get("includeHeaders") == "true"))
        with open(os.environ.get("KLTOOL_CAMPAIGN_LOG", os.devnull), "w") as f:
            f.write(f"produced in {produced:.0f} s; layout {json.dumps(layout)}\n")
            for name, opts in cases.items():
                s, k = got[name]
                f.write(f"{name} {json.dumps(opts)}\n  spark {s[0]} {s[1] if s[0] == 'error' else len(s[1])}\n"
                        f"  kltool {k[0]} {k[1] if k[0] == 'error' else len(k[1])}\n")
        yield {"cases": cases, "got": got, "layout": layout, "not_compacted": not_compacted}
    finally:
        if spark is not None:
            spark.stop()


def test_the_topics_hold_what_the_campaign_claims(campaign):
    assert not campaign["not_compacted"], campaign["not_compacted"]
    layout = campaign["layout"]
    assert set(layout) == {f"cg-{c}" for c in CODECS} | {"cg-idem", "cg-txn", "cg-console", "cg-compact"}
    kinds = {name: (s[0], k[0]) for name, (s, k) in campaign["got"].items()}
    rows = [n for n, (s, _) in kinds.items() if s == "rows"]
    assert len(rows) >= COMBOS // 3 and len(kinds) - len(rows) >= 5, kinds  # both rows and errors compared
    # (a record with a null header value, one with an empty header key, a null key, an empty value)
    seen = [r for n in rows if campaign["cases"][n].get("includeHeaders") == "true"
            for r in campaign["got"][n][0][1]]
    assert any(h and any(v is None for _, v in h) for h in (r[7] for r in seen))


@pytest.mark.parametrize("case", [f"c{i:02d}" for i in range(COMBOS)] + [f"o{i:02d}" for i in range(len(ODDITIES))]
                         + [f"p{i:02d}" for i in range(len(PAST_END))])
def test_same_outcome(campaign, case):
    opts = campaign["cases"][case]
    (skind, s), (kkind, k) = campaign["got"][case]
    if skind == "rows":
        assert kkind == "rows", f"{opts}: Spark read {len(s)} rows, kafka-log failed: {k}"
        if k != s:
            only_s = [r for r in s if r not in set(k)][:3]
            only_k = [r for r in k if r not in set(s)][:3]
            pytest.fail(f"{opts}: {len(s)} vs {len(k)} rows; only Spark's: {only_s}; only kltool's: {only_k}")
        return
    assert kkind == "error", f"{opts}: Spark failed ({s}); kafka-log read {len(k)} rows"
    assert "\n" not in k
    assert _kind(s) == _kind(k), f"{opts}: Spark: {s}\nkafka-log: {k}"
