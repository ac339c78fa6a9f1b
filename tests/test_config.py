from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore import FlushDiskType, StoreConfig, StoreConfigError


def test_defaults_are_rocketmq_defaults() -> None:
    c = StoreConfig()
    assert c.commitlog_segment_size == 1 << 30
    assert c.consume_queue_segment_size == 6_000_000
    assert c.index_file_size == 420_000_040
    assert c.max_message_size == 4 * 1024 * 1024
    assert c.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert (c.flush_interval, c.flush_least_pages, c.flush_thorough_interval) == (500, 4, 10_000)
    assert (c.commit_interval, c.commit_least_pages, c.transient_store_pool_size) == (200, 4, 5)
    assert c.sync_flush_timeout == 5_000
    assert (c.delete_when, c.file_reserved_time, c.disk_max_used_space_ratio) == ("04", 72, 75)
    assert c.delay_levels_ms[0] == 1000 and c.delay_levels_ms[-1] == 7_200_000 and c.max_delay_level == 18
    assert c.default_query_max_num == 32
    assert c.check_crc_on_recover and c.message_index_enable and not c.message_index_safe


def test_properties_file_with_rocketmq_names(tmp_path: Path) -> None:
    f = tmp_path / "broker.properties"
    f.write_text(
        "# RocketMQ names\nmappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=800\n"
        "maxHashSlotNum=64\nmaxIndexNum=256\nflushDiskType=SYNC_FLUSH\ncheckCRCOnRecover=false\n"
        "store_host=10.0.0.1:10911\nmessageDelayLevel=1s 2m\n"
    )
    c = StoreConfig.from_file(f)
    assert (c.commitlog_segment_size, c.consume_queue_entries, c.index_hash_slots, c.index_max_entries) == (
        65536,
        40,
        64,
        256,
    )
    assert c.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert c.check_crc_on_recover is False
    assert c.store_host == "10.0.0.1:10911"
    assert c.delay_levels_ms == (1000, 120_000)


def test_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "store.toml"
    f.write_text(
        'commitlog_segment_size = 131072\nflush_disk_type = "async_flush"\ngenerate_uniq_key = false\n'
    )
    c = StoreConfig.from_file(f)
    assert c.commitlog_segment_size == 131072 and c.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert c.generate_uniq_key is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no_such_setting=1\n", "unknown store setting"),
        ("flush_interval=soon\n", "flush_interval must be an integer"),
        ("mappedFileSizeConsumeQueue=801\n", "multiple of 20"),
        ("commitlog_segment_size=100\n", "at least 4096"),
        ("store_host=nonsense\n", "store_host"),
        ("messageDelayLevel=1x\n", "bad level"),
        ("deleteWhen=25\n", "delete_when"),
        ("flushDiskType=SOMETIMES\n", "ASYNC_FLUSH or SYNC_FLUSH"),
        ("just a line\n", "expected key=value"),
    ],
)
def test_bad_settings_name_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.properties"
    f.write_text(text)
    with pytest.raises(StoreConfigError, match=message):
        StoreConfig.from_file(f)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="cannot read"):
        StoreConfig.from_file(tmp_path / "absent.toml")


def test_transient_pool_needs_async_flush() -> None:
    with pytest.raises(StoreConfigError, match="ASYNC_FLUSH only"):
        StoreConfig(transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH")
