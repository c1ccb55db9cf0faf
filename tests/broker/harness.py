"""A real single-node Kafka 4.x broker for the tests (DESIGN.md §5).

The jars come from `make broker-jars` (tests/broker/pom.xml copied by Maven into a cache outside the work tree,
~/.cache/kltool-kafka-broker/<version>/ or $KLTOOL_KAFKA_BROKER_JARS); nothing is downloaded here.

One KRaft node, combined broker and controller, storage formatted with kafka.tools.StorageTool, listeners on
free ports of 127.0.0.1, heap -Xmx512m, a small cleaner buffer, and a log4j2 config that writes the broker's
log to WORKDIR/logs/server.log (tests read it for recovery and truncation lines).

Start-up is most of a broker test's time, so every JVM here runs with the client compiler only
(-XX:TieredStopAtLevel=1: the tests' loads are small) and with an application class-data-sharing archive
(AppCDS, `jvm_options`): the first broker started with a class path dumps the classes it loaded when it
stops (-XX:ArchiveClassesAtExit), into a cache beside the jars keyed by the java binary and the class path;
later JVMs with that class path map them instead of loading and verifying them again (a start of ~15 s on
a busy 2-CPU machine takes ~4 s). KLTOOL_BROKER_CDS=0 turns the archive off; a stale or foreign archive is
ignored by the JVM (-Xshare:auto).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
KAFKA_VERSION = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text()).group(1)
COMPLETE = ".complete"  # written by `make broker-jars` once every jar is copied

SERVER_STARTED = "Kafka Server started"  # KafkaRaftServer, after the broker reached RUNNING


def jar_dir() -> Path:
    env = os.environ.get("KLTOOL_KAFKA_BROKER_JARS")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "kltool-kafka-broker" / KAFKA_VERSION


def tiered_jar_dir() -> Path:
    """The tiered-storage test's extra jars (Kafka's LocalTieredStorage), fetched by `make broker-jars` from
    tests/broker/pom-tiered.xml beside the broker's jars, off their classpath."""
    return Path(str(jar_dir()) + "-tiered")


def missing() -> str | None:
    """Why the broker cannot run here (None when it can)."""
    if not shutil.which("java"):
        return "no java on PATH (the broker tests need Java 17+)"
    d = jar_dir()
    if not (d / COMPLETE).is_file() or not list(d.glob("kafka_2.13-*.jar")):
        return f"the Kafka {KAFKA_VERSION} jars are not in {d} (`make broker-jars` fetches them with Maven)"
    return None


def classpath() -> str:
    return str(jar_dir() / "*")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def cds_archive(cp: str) -> Path | None:
    """Where the AppCDS archive of JVMs with class path CP lives (it may not exist yet), or None when off.
    Keyed by the java binary and the class path's jars (names, sizes, times): a new JDK or new jars get a
    new archive."""
    if os.environ.get("KLTOOL_BROKER_CDS", "1") == "0":
        return None
    java = shutil.which("java")
    if not java:
        return None
    if any(not part.endswith("*") and Path(part).is_dir() for part in cp.split(os.pathsep)):
        return None  # a class directory (a test's shim): the JVM archives no class path with one
    h = hashlib.sha256()
    java = os.path.realpath(java)
    h.update(f"{java} {os.stat(java).st_mtime_ns}\n".encode())
    for part in cp.split(os.pathsep):
        files = sorted(Path(part[:-1]).glob("*.jar")) if part.endswith("*") else [Path(part)]
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f} {st.st_size} {st.st_mtime_ns}\n".encode())
    return Path(str(jar_dir()) + "-cds") / f"{h.hexdigest()[:20]}.jsa"


def jvm_options(cp: str) -> tuple[list[str], Path | None]:
    """The options of a test JVM with class path CP: C1 only, and the class path's CDS archive when there is
    one. When there is none yet, also where this JVM dumps one at exit (a temporary name: move it into
    place with :func:`keep_archive` once the JVM exited)."""
    opts = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    jsa = cds_archive(cp)
    if jsa is None:
        return opts, None
    opts.append("-Xlog:cds*=off,class+path*=off")  # no archive warnings on a tool's stdout
    if jsa.is_file():
        return [*opts, f"-XX:SharedArchiveFile={jsa}"], None
    try:
        jsa.parent.mkdir(parents=True, exist_ok=True)
        for old in jsa.parent.glob("*.tmp"):  # a dump whose test run died (~50 MB each)
            if time.time() - old.stat().st_mtime > 3600:
                old.unlink(missing_ok=True)
    except OSError:
        return opts, None
    dump = jsa.with_name(f"{jsa.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    return [*opts, f"-XX:ArchiveClassesAtExit={dump}"], dump


def keep_archive(dump: Path | None) -> None:
    """After a JVM that was to dump a CDS archive exited: move the archive into place (atomically; another
    test run may have won the race, which is as good)."""
    if dump is None or not dump.is_file():
        return
    final = dump.with_name(dump.name.split(".")[0] + ".jsa")
    try:
        if dump.stat().st_size > 0 and not final.exists():
            os.replace(dump, final)
    finally:
        dump.unlink(missing_ok=True)


def run_tool(main_class: str, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line classes (a fresh JVM) and return its output."""
    cp = classpath()
    opts, dump = jvm_options(cp)
    if dump is not None:  # only a broker dumps the archive (it loads the most classes)
        opts = [o for o in opts if not o.startswith("-XX:ArchiveClassesAtExit=")]
    cmd = ["java", "-Xmx256m", *opts, "-cp", cp,
           f"-Dlog4j2.configurationFile={HERE / 'log4j2-tools.xml'}", main_class, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="server" fileName="{log}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""


def produce_in_waves(prod, n: int, waves: int, send, flush_every: int) -> None:
    """``send(prod, i)`` for i in range(n), flushing every ``flush_every`` records and after each of the
    ``waves`` waves, then sleeping past ``segment.ms`` (1 s) so that the next wave rolls a new segment."""
    wave = n // waves
    for i in range(n):
        send(prod, i)
        if i % flush_every == flush_every - 1:
            prod.flush()
        if i % wave == wave - 1 and i + 1 < n:
            prod.flush()
            time.sleep(1.2)  # past segment.ms: the next record rolls a new segment


class Broker:
    """One KRaft node in WORKDIR: WORKDIR/data is its log dir, WORKDIR/logs/server.log its log."""

    def __init__(self, workdir: Path, extra: dict[str, str] | None = None):
        self.workdir = Path(workdir)
        self.logdir = self.workdir / "data"
        self.logs = self.workdir / "logs"
        self.server_log = self.logs / "server.log"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port, self.cport = free_port(), free_port()
        self.proc: subprocess.Popen | None = None
        self._cds_dump: Path | None = None  # where this JVM dumps a CDS archive at exit (jvm_options)
        self.start_seconds: list[float] = []
        self._log_mark = 0
        self.extra_classpath: list[str] = []  # put before the jars (a test's shim classes)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.logdir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.dedupe.buffer.size": "2097152",
            "log.cleaner.threads": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
        }
        props.update(extra or {})
        self.props = props
        self.config = self.workdir / "server.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.workdir / "log4j2.xml").write_text(LOG4J2.format(log=self.server_log))
        self.cluster_id = random_cluster_id()
        run_tool("kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}", "-c", str(self.config))  # an id may start with "-"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self, since_start: bool = False) -> str:
        """server.log (all of it, or only what the last start() wrote)."""
        if not self.server_log.exists():
            return ""
        with open(self.server_log, "rb") as f:
            if since_start:
                f.seek(self._log_mark)
            return f.read().decode("utf-8", "replace")

    def start(self, timeout: float = 180) -> float:
        """Start the JVM and wait until the broker serves; returns the seconds it took."""
        assert not self.running, "broker already running"
        self._log_mark = self.server_log.stat().st_size if self.server_log.exists() else 0
        cp = os.pathsep.join([*self.extra_classpath, classpath()])
        opts, self._cds_dump = jvm_options(cp)
        cmd = ["java", "-Xmx512m", "-Xms128m", *opts, "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}",
               "-cp", cp, "kafka.Kafka", str(self.config)]
        t0 = time.monotonic()
        console = open(self.logs / "console.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.workdir, start_new_session=True)
        console.close()
        while True:
            if SERVER_STARTED in self.log_text(since_start=True) and self._serves():
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode} during start:\n"
                                   f"{self.log_text(since_start=True)[-4000:]}\n"
                                   f"{(self.logs / 'console.log').read_text(errors='replace')[-2000:]}")
            if time.monotonic() - t0 > timeout:
                self.kill()
                raise RuntimeError(f"broker did not start within {timeout}s:\n{self.log_text(True)[-4000:]}")
            time.sleep(0.2)
        took = time.monotonic() - t0
        self.start_seconds.append(took)
        return took

    def _serves(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self, timeout: float = 120) -> None:
        """Clean shutdown: SIGTERM, wait for the JVM to exit (the broker writes .kafka_cleanshutdown)."""
        if not self.running:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"broker did not stop within {timeout}s after SIGTERM (killed)") from None
        self.proc = None
        keep_archive(self._cds_dump)
        self._cds_dump = None

    def kill(self) -> None:
        """SIGKILL: no clean-shutdown marker; the next start recovers."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)
        self.proc = None
        if self._cds_dump is not None:  # killed: no archive, or half of one
            self._cds_dump.unlink(missing_ok=True)
            self._cds_dump = None

    def ensure_running(self) -> None:
        if not self.running:
            self.start()

    def clean_shutdown_marker(self) -> Path:
        return self.logdir / ".kafka_cleanshutdown"

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.logdir / f"{topic}-{partition}"

    # -- clients -----------------------------------------------------------------------------------------

    def kafka_python_args(self) -> dict:
        return {"bootstrap_servers": self.bootstrap, "request_timeout_ms": 30000}

    def admin(self):
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(**self.kafka_python_args())

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        from kafka.admin import NewTopic

        a = self.admin()
        try:
            a.create_topics([NewTopic(name, partitions, 1, topic_configs=config or {})])
        finally:
            a.close()
        self.wait_for_leaders(name, partitions)

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float = 60) -> None:
        from kafka import KafkaConsumer

        c = KafkaConsumer(**self.kafka_python_args())
        t0 = time.monotonic()
        try:
            while True:
                parts = c.partitions_for_topic(topic) or set()
                if len(parts) == partitions:
                    try:
                        from kafka import TopicPartition

                        c.end_offsets([TopicPartition(topic, p) for p in parts])
                        return
                    except Exception:
                        pass
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"topic {topic}: no leaders for {partitions} partitions after {timeout}s")
                time.sleep(0.3)
                c._client.cluster.request_update()
        finally:
            c.close()

    def consume_all(self, topic: str, partition: int, isolation_level: str = "read_uncommitted",
                    timeout: float = 30) -> list:
        """Every record from offset 0 to the partition's end (ConsumerRecord objects), by kafka-python."""
        from kafka import KafkaConsumer, TopicPartition

        tp = TopicPartition(topic, partition)
        c = KafkaConsumer(**self.kafka_python_args(), enable_auto_commit=False, isolation_level=isolation_level)
        try:
            c.assign([tp])
            c.seek_to_beginning(tp)
            end = c.end_offsets([tp])[tp]  # read_committed: the last stable offset
            out = []
            t0 = time.monotonic()
            while c.position(tp) < end:
                for recs in c.poll(timeout_ms=1000).values():
                    out.extend(recs)
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"{topic}-{partition}: read {len(out)} records, position "
                                       f"{c.position(tp)} < end {end} after {timeout}s")
            return out
        finally:
            c.close()

    def list_offsets(self, topic: str, partition: int, time_spec: str) -> int | None:
        """ListOffsets through Kafka's GetOffsetShell (a JVM): --time -1/-2/-3/<ms>; None when no offset."""
        p = run_tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", self.bootstrap,
                     "--topic", topic, "--partitions", str(partition), "--time", time_spec)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith(f"{topic}:{partition}:")]
        if not lines:
            return None
        v = lines[0].rsplit(":", 1)[1]
        return int(v) if v else None

    def list_offsets_all(self, time_spec: str, pattern: str = "[^_].*") -> dict[tuple[str, int], int | None]:
        """ListOffsets for every partition of the topics matching PATTERN, by GetOffsetShell (one JVM)."""
        p = run_tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", self.bootstrap,
                     "--topic", pattern, "--time", time_spec)
        return _parse_offset_lines(p.stdout)


def _parse_offset_lines(text: str) -> dict[tuple[str, int], int | None]:
    out = {}
    for ln in text.splitlines():
        parts = ln.rsplit(":", 2)
        if len(parts) == 3 and parts[1].isdigit():
            out[(parts[0], int(parts[1]))] = int(parts[2]) if parts[2].lstrip("-").isdigit() else None
    return out
