"""The local driver JVM's class archive: recorded once, then mapped by every small local job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, spark
from rocketstore.spark import class_archive
from rocketstore.warm import scratch_config

QUICK = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
CFG = scratch_config()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if class_archive._key() is None:
        if os.environ.get("CI"):
            pytest.fail(
                "the class archive needs Java 17+ and PySpark (`make test` installs both where it can)"
            )
        pytest.skip("the class archive needs Java 17+ and PySpark")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "rocketstore"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with MessageStore.open(root, CFG) as opened:
        opened.put_messages([Message("Orders", f"order {i}".encode(), keys=[f"k{i}"]) for i in range(50)])
    return root


def test_a_small_local_job_maps_the_archive_only_when_it_is_whole(cache: Path, store: Path) -> None:
    quick = {"spark.driver.extraJavaOptions": QUICK}
    assert class_archive.archive() is None and spark.small_job_conf(store, "local[2]") == quick
    key = class_archive._key()
    cache.mkdir(parents=True)
    cut_short = cache / f"spark-classes-{key}-4096.jsa"
    cut_short.write_bytes(bytes(1000))  # a JDK 17 JVM dies of SIGBUS on such a file: never named
    assert class_archive.archive() is None and spark.small_job_conf(store, "local[2]") == quick
    other_java = cache / "spark-classes-0123456789abcdef-1000.jsa"
    other_java.write_bytes(bytes(1000))
    assert class_archive.archive() is None
    whole = cache / f"spark-classes-{key}-1000.jsa"
    whole.write_bytes(bytes(1000))
    assert class_archive.archive() == whole
    mapped = f"{QUICK} -XX:SharedArchiveFile={whole} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert spark.small_job_conf(store, "local[2]") == {"spark.driver.extraJavaOptions": mapped}
    assert spark.small_job_conf(store, "spark://host:7077") == {}


@pytest.mark.slow
def test_warm_records_an_archive_that_spark_export_maps(cache: Path, store: Path, tmp_path: Path) -> None:
    """``python -m rocketstore.warm`` records the archive once (a second run leaves it alone); a
    ``rocketstore spark export`` then loads Spark's classes from it, and its output stays clean."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache.parent)}
    warm = [
        subprocess.run(
            [sys.executable, "-m", "rocketstore.warm"], env=env, capture_output=True, text=True, timeout=1800
        )
        for _ in range(2)
    ]
    assert [w.returncode for w in warm] == [0, 0], warm[0].stderr
    assert "class archive ready" in warm[0].stderr and "class archive" not in warm[1].stderr
    archives = list(cache.glob("spark-classes-*.jsa"))
    assert archives == [class_archive.archive()] and archives[0].stat().st_size > 10 << 20
    assert sorted(p.name for p in cache.iterdir()) == [archives[0].name]  # nothing half-made left

    def export(out: str, cache_home: Path) -> tuple[dict[str, object], str]:
        log = tmp_path / f"{out}.classes.log"
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "rocketstore.cli",
                "spark",
                "export",
                str(store),
                str(tmp_path / out),
                "--json",
            ],
            env={
                **env,
                "XDG_CACHE_HOME": str(cache_home),
                "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={log}",
            },
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout), log.read_text("utf-8")

    result, classes = export("mapped", cache.parent)
    assert result["rows"] == 50
    # the driver JVM's log (written last: the launcher JVM before it writes the same file)
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in classes
    result, classes = export("without", tmp_path / "empty-cache")
    assert result["rows"] == 50
    assert "org.apache.spark.SparkContext source: file:" in classes and "(top)" not in classes
