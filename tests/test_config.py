from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocketstore import BrokerRole, FlushDiskType, Message, MessageStore, StoreConfig, StoreConfigError


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
        ("no_such_setting=1\n", "unknown setting.*'no_such_setting'"),
        (
            "flushIntervalComitLog=5\n",
            "'flushIntervalComitLog' \\(did you mean 'flushIntervalCommitLog'\\?\\)",
        ),
        ("commitlog_segmnet_size=4096\n", "did you mean 'commitlog_segment_size'"),
        ("storePathCommitLog=/data/commitlog\n", "storePathCommitLog=/data/commitlog: rocketstore keeps"),
        ("storePathRootDir=/a\nstorePathCommitLog=/b/commitlog\n", "give storePathRootDir"),
        ("enableDLegerCommitLog=true\n", "DLedger"),
        ("flush_interval=soon\n", "flush_interval must be an integer"),
        ("flush_interval=1_000\n", "flush_interval must be an integer"),  # int() takes it
        ("flush_interval=٣\n", "flush_interval must be an integer"),  # and other scripts' digits
        ("mappedFileSizeConsumeQueue=801\n", "multiple of 20"),
        ("commitlog_segment_size=100\n", "at least 4096"),
        ("store_host=nonsense\n", "store_host"),
        ("messageDelayLevel=1x\n", "bad level"),
        ("deleteWhen=25\n", "delete_when"),
        ("flushDiskType=SOMETIMES\n", "ASYNC_FLUSH or SYNC_FLUSH"),
        ("just a line\n", "unknown setting.*'just'"),  # java.util.Properties: key 'just'
    ],
)
def test_bad_settings_name_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.properties"
    f.write_text(text)
    with pytest.raises(StoreConfigError, match=message):
        StoreConfig.from_file(f)


@pytest.mark.parametrize("value", ["1_000", "٣", "²", "1" * 5000, "0x10", "1.5"])
def test_a_broker_int_setting_is_ascii_decimal(value: str) -> None:
    from rocketstore.broker import BrokerConfig

    with pytest.raises(StoreConfigError, match="transaction_check_max: expected an int"):
        BrokerConfig.from_mapping({"transactionCheckMax": value})
    assert BrokerConfig.from_mapping({"transactionCheckMax": " +7 "}).transaction_check_max == 7


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="cannot read"):
        StoreConfig.from_file(tmp_path / "absent.toml")


def test_a_fifo_config_file_of_the_store_or_the_broker_is_refused_not_read(tmp_path: Path) -> None:
    from rocketstore.broker.config import load_settings

    fifo = tmp_path / "serve.toml"
    os.mkfifo(fifo)  # a read would block until a writer came
    for load in (StoreConfig.from_file, load_settings):
        with pytest.raises(StoreConfigError, match="not a regular file"):
            load(fifo)


def test_transient_pool_needs_async_flush() -> None:
    with pytest.raises(StoreConfigError, match="ASYNC_FLUSH only"):
        StoreConfig(transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH")


BROKER_CONF = Path(__file__).parent / "fixtures" / "broker.conf"


def broker_conf(tmp_path: Path, root: Path) -> Path:
    """tests/fixtures/broker.conf (a stock RocketMQ 4.9 broker.conf) with its store under ``root``."""
    f = tmp_path / "broker.conf"
    f.write_text(BROKER_CONF.read_text("utf-8").replace("STORE_ROOT", str(root)))
    return f


def test_a_stock_broker_conf_loads_its_store_settings_and_lists_the_rest(tmp_path: Path) -> None:
    c = StoreConfig.from_file(broker_conf(tmp_path, tmp_path / "store"))
    assert (c.delete_when, c.file_reserved_time, c.flush_disk_type) == ("04", 48, FlushDiskType.ASYNC_FLUSH)
    assert (c.consume_queue_entries, c.max_message_size, c.flush_interval) == (40, 65536, 1000)
    assert c.disk_max_used_space_ratio == 88
    assert (c.broker_role, c.ha_listen_port) == (BrokerRole.ASYNC_MASTER, 10912)  # replication's settings
    assert c.store_path_root_dir == str(tmp_path / "store")
    # RocketMQ 4.9 has no setter for the old spelling: it keeps 1 GiB segments, and so does the store
    assert c.commitlog_segment_size == 1 << 30
    assert "RocketMQ 4.9 ignores too" in c.ignored_keys["mapedFileSizeCommitLog"]
    assert set(c.ignored_keys) == {
        "brokerClusterName",
        "brokerName",
        "brokerId",
        "namesrvAddr",
        "listenPort",
        "brokerIP1",
        "autoCreateTopicEnable",
        "sendMessageThreadPoolNums",
        "mapedFileSizeCommitLog",
    }
    assert c.ignored_keys["brokerName"] == "a broker setting, not the store's"
    assert "brokerRole" not in c.ignored_keys and "haListenPort" not in c.ignored_keys
    assert StoreConfig().ignored_keys == {}


def test_the_broker_conf_store_path_is_where_open_without_a_path_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "rmq" / "store"
    c = StoreConfig.from_file(broker_conf(tmp_path, root)).replace(commitlog_segment_size=65536)
    monkeypatch.chdir(tmp_path)  # not ./store
    with MessageStore.open(config=c) as store:
        assert store.layout.root == root
        assert store.put_message(Message("T", b"x")).ok
    assert (root / "commitlog" / f"{0:020d}").stat().st_size == 65536
    assert not (tmp_path / "store").exists()
    with MessageStore.open(tmp_path / "elsewhere", c) as store:  # a path given wins
        assert store.layout.root == tmp_path / "elsewhere"


@pytest.mark.parametrize(
    ("flush", "role", "waits"),
    [
        (FlushDiskType.ASYNC_FLUSH, BrokerRole.ASYNC_MASTER, False),
        (FlushDiskType.ASYNC_FLUSH, BrokerRole.SLAVE, False),
        (FlushDiskType.SYNC_FLUSH, BrokerRole.ASYNC_MASTER, True),
        (FlushDiskType.ASYNC_FLUSH, BrokerRole.SYNC_MASTER, True),
    ],
)
def test_puts_wait_under_sync_flush_or_as_a_sync_master(
    flush: FlushDiskType, role: BrokerRole, waits: bool
) -> None:
    assert StoreConfig(flush_disk_type=flush, broker_role=role, ha_listen_port=0).puts_wait is waits
