"""How full the disk is: RocketMQ's used / (used + usable), rounded up to a whole percent, in the
one function every judge and report of it uses (reclamation, the disk-full refusal, runtime_info)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from rocketstore import disk_space
from rocketstore.config import StoreConfig
from rocketstore.disk_space import disk_used_ratio, used_ratio
from rocketstore.message import Message
from rocketstore.results import PutStatus
from rocketstore.store import MessageStore


class FakeStatVfs(NamedTuple):
    f_blocks: int
    f_bfree: int
    f_bavail: int
    f_frsize: int = 4096


def test_root_reserved_blocks_count_neither_as_used_nor_as_room() -> None:
    # 1000 blocks, 300 free of which 50 only root may use: 700 used, 250 usable
    assert used_ratio(FakeStatVfs(1000, 300, 250)) == 0.74  # 70 / 95 = 73.7 %, rounded up
    # (total - usable) / total would say 0.75; (total - free) / total 0.70


def test_rounded_up_to_a_whole_percent_only_when_not_whole() -> None:
    assert used_ratio(FakeStatVfs(100, 71, 71)) == 0.29
    assert used_ratio(FakeStatVfs(1000, 709, 709)) == 0.30  # 29.1 %
    assert used_ratio(FakeStatVfs(100, 100, 100)) == 0.0
    assert used_ratio(FakeStatVfs(100, 0, 0)) == 1.0


def test_a_filesystem_without_blocks_reads_as_empty() -> None:
    assert used_ratio(FakeStatVfs(0, 0, 0)) == 0.0
    assert used_ratio(FakeStatVfs(10, 10, 0)) == 0.0  # nothing used, nothing usable


def test_it_reads_statvfs_of_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def statvfs(path: os.PathLike[str] | str) -> FakeStatVfs:
        asked.append(os.fspath(path))
        return FakeStatVfs(1000, 300, 250)

    monkeypatch.setattr(disk_space.os, "statvfs", statvfs)
    assert disk_used_ratio(tmp_path) == 0.74
    assert asked == [str(tmp_path)]


def test_the_store_judges_and_reports_the_disk_by_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime_info's ratios (brokerStatus, clusterList #SPACE, `rocketstore status`) and the
    disk-full refusal of puts read the same statvfs figures through RocketMQ's formula; a ratio
    equal to disk_warning_ratio is not above it (RocketMQ compares 0.90 > 0.90)."""
    fs = [FakeStatVfs(1000, 300, 250)]
    monkeypatch.setattr(disk_space.os, "statvfs", lambda _path: fs[0])
    monkeypatch.setattr("rocketstore.store.disk_used_ratio", disk_used_ratio)  # not conftest's 0.5
    cfg = StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=100, message_index_enable=False)
    with MessageStore.open(tmp_path / "store", cfg) as store:
        info = store.runtime_info()
        assert (info["commitLogDiskRatio"], info["consumeQueueDiskRatio"]) == (0.74, 0.74)
        fs[0] = FakeStatVfs(1000, 145, 95)  # 855 / 950 = 90 % exactly
        assert store.reclaim().disk_used_ratio == 0.90
        assert not store.disk_full
        assert store.put_message(Message("T", b"x")).status is PutStatus.PUT_OK
        fs[0] = FakeStatVfs(1000, 140, 90)  # 860 / 950 = 90.5 %: 91
        assert store.reclaim().disk_used_ratio == 0.91
        assert store.disk_full
        assert store.put_message(Message("T", b"y")).status is PutStatus.DISK_FULL
        assert store.runtime_info()["commitLogDiskRatio"] == 0.91


@pytest.mark.skipif(
    not os.environ.get("ROCKETMQ_HOME") or shutil.which("java") is None,
    reason="needs RocketMQ 4.9.8's jars (ROCKETMQ_HOME) and java",
)
def test_the_same_figure_as_rocketmqs_own_function(tmp_path: Path) -> None:
    source = tmp_path / "DiskRatio.java"
    source.write_text(
        "public class DiskRatio { public static void main(String[] a) {"
        " System.out.println(org.apache.rocketmq.common.UtilAll.getDiskPartitionSpaceUsedPercent(a[0])); } }"
    )
    lib = Path(os.environ["ROCKETMQ_HOME"]) / "lib"
    java = subprocess.run(
        ["java", "-cp", f"{lib}/*", str(source), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert java.returncode == 0, java.stderr
    ours = disk_used_ratio(tmp_path)
    # other processes write to this disk meanwhile: the same whole percent, or the next one
    assert abs(float(java.stdout.strip()) - ours) <= 0.011, (java.stdout, ours)
