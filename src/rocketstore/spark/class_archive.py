"""The local driver JVM's class-data-sharing archive: Spark's classes loaded and verified once.

A local Spark session's driver JVM spends most of its start parsing and verifying some ten
thousand classes (9 s of CPU on a 2-core machine, with ``small_job_conf``'s JIT settings); a
dynamic CDS archive (``-XX:ArchiveClassesAtExit``, JDK 13 and later) keeps them ready to map,
which halves that. ``build`` records one by running a small export in a child process and checks
that a JVM maps it; ``java_options`` names it for later sessions. ``python -m rocketstore.warm``
(which ``make`` runs) builds it.

The archive belongs to one Java and one Spark installation: its name carries a key of both, and
the JVM itself checks the class path and ignores an archive recorded for another (silently: its
warning would go to the job's standard output). It lives in the user's cache directory
(``$XDG_CACHE_HOME/rocketstore``, else ``~/.cache/rocketstore``), about 180 MB; deleting it only
makes the next local jobs start slower. An archive whose size is not the one recorded in its
name is never used: a cut-short archive crashes JDK 17 with SIGBUS instead of being refused.

    python -m rocketstore.spark.class_archive OUT.jsa   (the child process ``build`` runs)
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["archive", "build", "java_options"]

_PREFIX = "spark-classes-"
_MAGIC = 0xF00BABA8  # a dynamic CDS archive's first four bytes (native byte order)
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_BUILD_TIMEOUT = 900.0  # s: a Spark session, one small export and the dump, on a loaded machine


def _java() -> Path | None:
    """The java Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return None
    return Path(os.path.realpath(found))


def _spark_jars() -> Path | None:
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        jars = Path(spark_home) / "jars"
    else:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or spec.origin is None:
            return None
        jars = Path(spec.origin).parent / "jars"
    return jars if jars.is_dir() else None


def _key() -> str | None:
    """What the archive was recorded for: the java binary and Spark's jars (names, sizes, mtimes)."""
    java, jars = _java(), _spark_jars()
    if java is None or jars is None:
        return None
    digest = hashlib.sha256()
    for path in (java, *sorted(jars.iterdir())):
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocketstore"


def archive() -> Path | None:
    """The archive for this Java and Spark, if one was built and is whole."""
    key = _key()
    if key is None:
        return None
    for path in _cache_dir().glob(f"{_PREFIX}{key}-*.jsa"):
        size = path.name[len(_PREFIX) + len(key) + 1 : -len(".jsa")]
        try:
            if size.isdigit() and path.stat().st_size == int(size):
                return path
        except OSError:
            continue
    return None


def java_options() -> str:
    """Driver JVM options that map the archive, or "" when there is none."""
    path = archive()
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if path is not None else ""


def build(timeout: float = _BUILD_TIMEOUT) -> Path | None:
    """The archive, recorded now unless there is one; None when Java or PySpark is missing.
    Raises RuntimeError, with what the JVM said, when recording or checking it fails."""
    found = archive()
    if found is not None:
        return found
    key, java = _key(), _java()
    if key is None or java is None:
        return None
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rocketstore-classes-", dir=cache) as tmp:
        recorded = Path(tmp) / "classes.jsa"
        child = subprocess.run(
            [sys.executable, "-m", "rocketstore.spark.class_archive", str(recorded)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if child.returncode != 0 or not _is_archive(recorded):
            raise RuntimeError(f"recording Spark's class archive failed: {_tail(child.stderr)}")
        class_path = (Path(tmp) / "class-path").read_text("utf-8")
        # a JVM that must map it (-Xshare:on) with the class path it was recorded with
        trial = subprocess.run(
            [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={recorded}", "-cp", class_path, "-version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if trial.returncode != 0:
            raise RuntimeError(f"the recorded class archive does not map: {_tail(trial.stderr)}")
        target = cache / f"{_PREFIX}{key}-{recorded.stat().st_size}.jsa"
        os.replace(recorded, target)
    return target


def _is_archive(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and int.from_bytes(head, sys.byteorder) == _MAGIC


def _tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return " / ".join(lines[-3:]) or "no output"


def _record(out: Path) -> int:
    """Run a small export on a local session whose JVM records every class it loaded into
    ``out`` as it exits; write its class path beside ``out``. Returns the JVM's exit code."""
    from rocketstore.message import Message
    from rocketstore.spark import _QUICK_JVM, jobs, session
    from rocketstore.store import MessageStore
    from rocketstore.warm import scratch_config

    with tempfile.TemporaryDirectory(prefix="rocketstore-classes-job-") as tmp:
        store = Path(tmp) / "store"
        with MessageStore.open(store, scratch_config()) as opened:
            opened.put_messages([Message("Classes", b"x" * i, keys=[f"k{i}"]) for i in range(16)])
        options = f"{_QUICK_JVM} -XX:ArchiveClassesAtExit={out} {_QUIET}"
        spark = session("local[1]", "rocketstore-class-archive", **{"spark.driver.extraJavaOptions": options})
        spark.sparkContext.setLogLevel("ERROR")
        jobs.export(spark, str(store), str(Path(tmp) / "out"))
        jobs.export(spark, str(store), str(Path(tmp) / "json"), fmt="json")
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        (out.parent / "class-path").write_text(jvm.System.getProperty("java.class.path"), "utf-8")
        gateway = spark.sparkContext._gateway
        assert gateway is not None
        spark.stop()
        # the JVM exits (and writes the archive) when its standard input closes
        process = gateway.proc
        process.stdin.close()
        return int(process.wait(_BUILD_TIMEOUT))


if __name__ == "__main__":
    raise SystemExit(_record(Path(sys.argv[1])))
