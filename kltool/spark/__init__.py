"""Spark integration: the ``kafka-log`` data source and reports. Importing this package is cheap;
pyspark and pyarrow are imported only when a function here is called.

>>> from kltool.spark import session, register
>>> spark = session("local[*]")            # PYSPARK_PYTHON set, logging quiet, kafka-log registered
>>> spark.read.format("kafka-log").option("path", "/var/lib/kafka/data").load().count()
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

from ..errors import KltoolError

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class SparkUnavailable(KltoolError):
    """Spark (or Java, or pyspark) cannot be started."""


def register(spark, *, pushdown: bool | None = None) -> bool:
    """Make ``spark.read.format("kafka-log")`` available in ``spark``; returns whether filters are
    pushed down (``pushdown``: see :func:`kltool.spark.datasource.register`; by default only where
    Spark cannot reuse a pushed plan in another scan)."""
    from .datasource import register as _register

    return _register(spark, pushdown=pushdown)


def _check_java() -> None:
    """Spark starts ``$JAVA_HOME/bin/java`` when JAVA_HOME is set (else ``java`` on PATH): check it
    here, so that a wrong JAVA_HOME is one clear line rather than Py4J's "Java gateway process
    exited before sending its port number"."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.path.isfile(java) or not os.access(java, os.X_OK):
            raise SparkUnavailable(f"JAVA_HOME={home} has no bin/java: point JAVA_HOME at a Java 17+ "
                                   "installation (the directory holding bin/java) or unset it to use java on PATH")
        return
    if shutil.which("java") is None:
        raise SparkUnavailable("Java not found: spark-report needs Java 17 or later on PATH (or JAVA_HOME)")


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"kltool-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == _LOG4J:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(_LOG4J)
    os.replace(tmp, path)
    return path


def _is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def session(master: str = "local[*]", app_name: str = "kltool", *, quiet: bool = True, conf: dict | None = None,
            jvm_log: bool | str = False, ship: bool = False, pushdown: bool | None = None):
    """A SparkSession for kltool: Python workers run this interpreter (unless ``PYSPARK_PYTHON`` or
    ``spark.pyspark.python`` says otherwise: a user's choice is kept), Spark logs only errors (on
    stderr), no UI, few shuffle partitions, and ``kafka-log`` registered (``pushdown``: filter
    pushdown, by default only where Spark keeps a pushed plan to its own scan, see
    :func:`kltool.spark.datasource.register`). ``conf`` entries (``--conf k=v``) are applied last and win.

    ``ship`` sends kltool itself to the executors (:func:`ship_kltool`), for clusters whose Python
    does not have kltool installed.

    ``jvm_log`` (True or a file name) sends the JVM's own stderr (its start-up banner, log lines and
    the Python workers' stderr) to that file instead of this process's stderr.

    Raises :class:`SparkUnavailable` (a KltoolError, exit code 2) when pyspark, pyarrow or Java is
    missing or the master URL is refused.
    """
    try:
        import pyarrow  # noqa: F401
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise SparkUnavailable(f"{e.name} is not installed: pip install 'kltool[spark]'") from None
    _check_java()
    conf = dict(conf or {})
    b = (SparkSession.builder.master(master).appName(app_name)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "8")
         .config("spark.sql.session.timeZone", "UTC")
         .config(PUSHDOWN_CONF, "true" if pushdown else "false"))  # register() sets it where safe
    # Workers run this interpreter (it has kltool, pyarrow and the same pyspark) unless the user chose
    # one: PYSPARK_PYTHON, else --conf spark.pyspark.python. pyspark's driver reads the choice from
    # the environment when it starts the context (spark-submit would have set it from the conf).
    python = os.environ.get("PYSPARK_PYTHON") or conf.get("spark.pyspark.python") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    if "spark.pyspark.python" not in conf:
        b = b.config("spark.pyspark.python", python)
    driver = os.environ.get("PYSPARK_DRIVER_PYTHON") or conf.get("spark.pyspark.driver.python") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = driver  # the driver's workers (data source planning)
    if "spark.pyspark.driver.python" not in conf:
        b = b.config("spark.pyspark.driver.python", driver)
    if quiet:
        opt = f"-Dlog4j2.configurationFile=file:{_log4j_file()}"
        for k in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            if k not in conf:
                b = b.config(k, opt)
    for k, v in conf.items():
        b = b.config(k, str(v))
    log_path = None
    saved = None
    if jvm_log:
        log_path = jvm_log if isinstance(jvm_log, str) else os.path.join(
            tempfile.gettempdir(), f"kltool-spark-{os.getpid()}.log")
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(fd, 2)  # inherited by the JVM that getOrCreate launches
        os.close(fd)
    try:
        spark = b.getOrCreate()
    except Exception as e:  # Py4J / JVM errors: one line
        msg = _first_line(e)
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
            saved = None
            msg = _log_hint(log_path, msg)
        if "master" in msg.lower():
            raise SparkUnavailable(f"Spark refused --master {master!r}: {msg}") from None
        raise SparkUnavailable(f"cannot start Spark (master {master!r}): {msg}") from None
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    if ship:
        ship_kltool(spark)
    register(spark, pushdown=pushdown)
    return spark


def kltool_zip(directory: str | None = None) -> str:
    """A zip of the kltool package's Python files (no C extension: the pure-Python decoder runs
    instead), for ``SparkContext.addPyFile`` / ``spark.submit.pyFiles`` / ``--py-files``."""
    import zipfile

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../kltool
    root = os.path.dirname(pkg)
    directory = directory or tempfile.mkdtemp(prefix="kltool-pyfiles-")
    out = os.path.join(directory, "kltool.zip")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".py"):
                    full = os.path.join(dirpath, name)
                    z.write(full, os.path.relpath(full, root))
    return out


def ship_kltool(spark) -> str:
    """Send kltool to the executors of ``spark`` (for Python environments without it): a zip of its
    Python files added with ``addPyFile``. Returns the zip's path. Their Python still needs pyarrow,
    crc32c and, for compressed topics, lz4, zstandard and cramjam: a missing one fails the job with
    one line naming it and the executor. ``isal`` is optional (gzip inflates 2-3x faster with it; zlib
    gives the same rows without it)."""
    path = kltool_zip()
    spark.sparkContext.addPyFile(path)
    return path


def _log_hint(log_path: str | None, msg: str) -> str:
    """Add the telling line of the JVM's log (e.g. "Could not parse Master URL") to ``msg``."""
    if not log_path:
        return msg
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return msg
    for ln in lines:
        if "Exception:" in ln and not ln.startswith("at "):
            return ln.split("Exception:", 1)[1].strip()[:300] or msg
    return f"{msg} (JVM log: {log_path})"


_KLTOOL_ERROR = re.compile(r"kltool\.errors\.(\w+): (.+)|\b(UsageError|CorruptDataError|KltoolError): (.+)")


def spark_error(e: BaseException) -> KltoolError:
    """A one-line KltoolError for an exception out of Spark: a kltool error raised inside a Python
    worker keeps its message; anything else gives its first meaningful line."""
    from ..errors import CorruptDataError, UsageError

    text = str(e)
    m = _KLTOOL_ERROR.search(text)
    if m:
        kind = m.group(1) or m.group(3)
        msg = (m.group(2) or m.group(4)).strip()
        cls = {"UsageError": UsageError, "CorruptDataError": CorruptDataError}.get(kind, KltoolError)
        return cls(msg)
    for pat in (r"FileNotFoundError: (.+)", r"PermissionError: (.+)"):
        m = re.search(pat, text)
        if m:
            return KltoolError(m.group(1).strip())
    # A Python traceback from a worker: its last "SomeError: message" line says what happened.
    last = re.findall(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", text, re.M)
    if last:
        return SparkUnavailable(f"Spark failed: {last[-1][0].rsplit('.', 1)[-1]}: {last[-1][1].strip()[:300]}")
    return SparkUnavailable(f"Spark failed: {_first_line(e)}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "Traceback", "JVM stacktrace")):
            return line[:300]
    return text.splitlines()[0][:300]


__all__ = ["register", "session", "ship_kltool", "kltool_zip", "spark_error", "SparkUnavailable"]
