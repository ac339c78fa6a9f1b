"""StoreConfig: every knob of the store, with RocketMQ 4.9's defaults.

Durations are in milliseconds (as in RocketMQ's ``MessageStoreConfig``) except
``file_reserved_time``, which is in hours. A config can be built in code or loaded from a
TOML or ``.properties`` file with ``StoreConfig.from_file``; file keys may use the field names
below or RocketMQ's own camelCase names (``mappedFileSizeCommitLog``, ``flushDiskType`` ...).

A stock RocketMQ 4.9 ``broker.conf`` loads as it is: the store settings rocketstore implements
are read; every other setting RocketMQ 4.9's broker knows (``brokerName``, ``brokerRole``,
``namesrvAddr``, ``haListenPort`` ...) is accepted and listed in ``ignored_keys`` with why it is
not used. A key neither rocketstore nor RocketMQ 4.9 knows is refused, naming it: RocketMQ itself
skips unknown keys silently, which is how a misspelt setting goes unnoticed for years.
``storePathRootDir`` is the store directory ``MessageStore.open`` uses when given no path;
``storePathCommitLog``, if given, must be that directory's ``commitlog`` (rocketstore keeps the
commitlog inside the store directory).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketstore import properties
from rocketstore.codec.java_number import parse_java_long
from rocketstore.errors import StoreConfigError
from rocketstore.rocketmq_keys import BROKER_KEYS, OLD_SPELLINGS, STORE_KEYS

__all__ = ["DEFAULT_DELAY_LEVELS", "BrokerRole", "FlushDiskType", "StoreConfig"]

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class FlushDiskType(str, enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(str, enum.Enum):
    """RocketMQ's brokerRole: a master serves replicas; SYNC_MASTER puts wait for one's ack."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True)
class StoreConfig:
    # --- geometry -------------------------------------------------------------------------
    commitlog_segment_size: int = 1 << 30
    consume_queue_entries: int = 300_000
    index_hash_slots: int = 5_000_000
    index_max_entries: int = 20_000_000
    max_message_size: int = 4 * 1024 * 1024
    # --- resources --------------------------------------------------------------------------
    # Consume-queue and index files mapped at once; the least recently used beyond it are
    # unmapped until read again (storage/map_cache.py). Before Python 3.13 each mapping also
    # holds a descriptor: 512 leaves room under ``ulimit -n 1024`` for the commitlog and the rest.
    max_mapped_files: int = 512
    # --- flushing ---------------------------------------------------------------------------
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval: int = 500
    flush_least_pages: int = 4
    flush_thorough_interval: int = 10_000
    # RocketMQ's flushCommitLogTimed (4.9 default true): the ASYNC flusher sleeps its interval;
    # false: puts wake it as soon as flush_least_pages are dirty (less data at risk of a power
    # loss, 20-30 % fewer puts per second here, since it then syncs every few pages).
    flush_commit_log_timed: bool = True
    commit_interval: int = 200
    commit_least_pages: int = 4
    commit_thorough_interval: int = 200
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    sync_flush_timeout: int = 5_000
    flush_consume_queue_interval: int = 1_000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    warm_mapped_file_enable: bool = False
    os_page_cache_busy_timeout: int = 1_000
    # --- index and recovery -----------------------------------------------------------------
    message_index_enable: bool = True
    message_index_safe: bool = False
    check_crc_on_recover: bool = True
    # --- reclamation ------------------------------------------------------------------------
    delete_when: str = "04"
    file_reserved_time: int = 72
    disk_max_used_space_ratio: int = 75
    disk_clean_forcibly_ratio: int = 85
    disk_warning_ratio: int = 90
    clean_resource_interval: int = 10_000
    delete_commitlog_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120_000
    manual_delete_file_several_times: int = 20
    # lifecycle: delayed delivery, topics, consumer offsets
    schedule_tick: int = (
        100  # RocketMQ's DELAY_FOR_A_WHILE: how often each delay level looks for due messages
    )
    default_topic_queue_nums: int = 4
    flush_consumer_offset_interval: int = 5_000
    # --- timer messages (docs/timers.md; RocketMQ 5's timer wheel) ------------------------
    timer_wheel_enable: bool = True
    # slot width, 100, 200, 500 or 1000 ms (RocketMQ's default 1000): a timer is delivered at
    # most one precision (plus the delivery's own time) after it is due, never before
    timer_precision_ms: int = 100
    timer_max_delay_sec: int = 259_200  # 3 days: a timer due later is refused
    # slots ahead beyond which a timer waits in a nearer slot and is put again (rolls)
    timer_roll_window_slots: int = 172_800
    timer_log_segment_size: int = 100 * 1024 * 1024
    timer_flush_interval: int = 1_000
    # --- reading ----------------------------------------------------------------------------
    default_query_max_num: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    # --- messages ---------------------------------------------------------------------------
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    store_host: str = "127.0.0.1:10911"
    generate_uniq_key: bool = True
    # --- files --------------------------------------------------------------------------------
    # permission bits of the files and directories the store creates (less the process umask);
    # in a config file, octal: file_mode = 0o640 (TOML) or fileMode=0640 (.properties)
    file_mode: int = 0o600
    dir_mode: int = 0o700
    # --- where ------------------------------------------------------------------------------
    # RocketMQ's storePathRootDir: the store directory MessageStore.open uses when given no path
    store_path_root_dir: str | None = None
    # --- replication (docs/replication.md) --------------------------------------------------
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    ha_listen_port: int | None = None  # None: no HA server; 0: any free port (see store.ha_port)
    # the HA server's bind address: loopback unless told otherwise (it serves the whole commitlog to
    # whoever connects); "" or "0.0.0.0" binds every interface, as RocketMQ does
    ha_listen_host: str = "127.0.0.1"
    ha_master_address: str | None = None  # a SLAVE's "host:port" of its master's HA port
    ha_send_heartbeat_interval: int = 5_000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32_768
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_timeout: int = 3_000
    # where an empty slave asks to start (a segment boundary); None: like RocketMQ, the
    # master's choice (its last segment from a RocketMQ master, its whole log from rocketstore)
    ha_start_offset: int | None = None
    # derived, not settable
    delay_levels_ms: tuple[int, ...] = field(init=False, repr=False, compare=False)
    # set by from_file / from_mapping: each RocketMQ setting of the file the store does not use,
    # and why (a copy made by replace() has none)
    ignored_keys: Mapping[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.flush_disk_type, str) and not isinstance(self.flush_disk_type, FlushDiskType):
            try:
                object.__setattr__(self, "flush_disk_type", FlushDiskType(self.flush_disk_type.upper()))
            except ValueError:
                raise StoreConfigError(
                    f"flush_disk_type must be ASYNC_FLUSH or SYNC_FLUSH, not {self.flush_disk_type!r}"
                ) from None
        if not isinstance(self.broker_role, BrokerRole):
            try:
                object.__setattr__(self, "broker_role", BrokerRole(str(self.broker_role).upper()))
            except ValueError:
                raise StoreConfigError(
                    f"broker_role must be ASYNC_MASTER, SYNC_MASTER or SLAVE, not {self.broker_role!r}"
                ) from None
        for f in dataclasses.fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            if f.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, int)):
                raise StoreConfigError(f"{f.name} must be an integer, not {value!r}")
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise StoreConfigError(f"{f.name} must be true or false, not {value!r}")
            if f.type == "str" and not isinstance(value, str):
                raise StoreConfigError(f"{f.name} must be a string, not {value!r}")
        if self.store_path_root_dir is not None and not isinstance(self.store_path_root_dir, str):
            raise StoreConfigError(f"store_path_root_dir must be a string, not {self.store_path_root_dir!r}")
        _require(self.commitlog_segment_size >= 4096, "commitlog_segment_size must be at least 4096 bytes")
        _require(self.commitlog_segment_size <= (1 << 31) - 1, "commitlog_segment_size must be below 2 GiB")
        _require(self.consume_queue_entries >= 1, "consume_queue_entries must be at least 1")
        _require(self.index_hash_slots >= 1, "index_hash_slots must be at least 1")
        _require(self.index_max_entries >= 2, "index_max_entries must be at least 2 (entry 0 is unused)")
        _require(self.max_message_size >= 1, "max_message_size must be positive")
        _require(self.max_mapped_files >= 1, "max_mapped_files must be at least 1")
        for name in ("disk_max_used_space_ratio", "disk_clean_forcibly_ratio", "disk_warning_ratio"):
            _require(0 < getattr(self, name) <= 100, f"{name} must be a percentage in 1..100")
        for name in (
            "flush_interval",
            "flush_thorough_interval",
            "commit_interval",
            "sync_flush_timeout",
            "flush_consume_queue_interval",
            "clean_resource_interval",
            "os_page_cache_busy_timeout",
            "schedule_tick",
            "flush_consumer_offset_interval",
            "timer_flush_interval",
        ):
            _require(getattr(self, name) > 0, f"{name} must be positive (milliseconds)")
        _require(
            0 <= self.file_mode <= 0o777 and self.file_mode & 0o600 == 0o600,
            f"file_mode must be permission bits including owner read and write (0o600), "
            f"not {self.file_mode:#o}",
        )
        _require(
            0 <= self.dir_mode <= 0o777 and self.dir_mode & 0o700 == 0o700,
            f"dir_mode must be permission bits including owner read, write and search (0o700), "
            f"not {self.dir_mode:#o}",
        )
        _require(self.default_query_max_num >= 1, "default_query_max_num must be at least 1")
        _require(1 <= self.default_topic_queue_nums <= 1024, "default_topic_queue_nums must be in 1..1024")
        _require(
            not (self.transient_store_pool_enable and self.flush_disk_type is FlushDiskType.SYNC_FLUSH),
            "transient_store_pool_enable works with ASYNC_FLUSH only "
            "(RocketMQ ignores the pool under SYNC_FLUSH)",
        )
        _require(self.transient_store_pool_size >= 1, "transient_store_pool_size must be at least 1")
        self._check_replication()
        self._check_timer()
        from rocketstore.codec.host import parse_host  # local: codec imports errors only

        try:
            parse_host(self.store_host)
        except ValueError as exc:
            raise StoreConfigError(f"store_host: {exc}") from None
        object.__setattr__(self, "delay_levels_ms", _parse_delay_levels(self.message_delay_level))
        for hour in self.delete_when.split(";"):
            _require(
                hour.strip().isascii() and hour.strip().isdigit() and 0 <= int(hour) <= 23,
                f"delete_when must be ';'-separated hours 0-23, not {self.delete_when!r}",
            )

    def _check_timer(self) -> None:
        _require(
            self.timer_precision_ms in (100, 200, 500, 1000),
            f"timer_precision_ms must be 100, 200, 500 or 1000, not {self.timer_precision_ms}",
        )
        _require(self.timer_max_delay_sec >= 1, "timer_max_delay_sec must be at least 1")
        _require(
            2 <= self.timer_roll_window_slots <= 7 * 86400 - 60,
            f"timer_roll_window_slots must be in 2..{7 * 86400 - 60} (the wheel's slots less 60)",
        )
        _require(self.timer_log_segment_size >= 4096, "timer_log_segment_size must be at least 4096 bytes")

    def _check_replication(self) -> None:
        for name in ("ha_listen_port", "ha_start_offset"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise StoreConfigError(f"{name} must be an integer or unset, not {value!r}")
        port = self.ha_listen_port
        _require(port is None or 0 <= port <= 65535, f"ha_listen_port must be in 0..65535, not {port}")
        for name in (
            "ha_send_heartbeat_interval",
            "ha_housekeeping_interval",
            "ha_transfer_batch_size",
            "ha_slave_fallbehind_max",
            "slave_timeout",
        ):
            _require(getattr(self, name) > 0, f"{name} must be positive")
        _require(
            self.ha_transfer_batch_size <= 4 * 1024 * 1024 - 12,
            "ha_transfer_batch_size must be at most 4 MiB - 12 (a RocketMQ slave's read buffer)",
        )
        start = self.ha_start_offset
        _require(
            start is None or (start >= 0 and start % self.commitlog_segment_size == 0),
            f"ha_start_offset must be a commitlog segment boundary, not {start}",
        )
        _require(
            self.broker_role is not BrokerRole.SYNC_MASTER or port is not None,
            "a SYNC_MASTER needs ha_listen_port (0: any free port) for its slaves to connect to",
        )
        if self.broker_role is BrokerRole.SLAVE:
            # None: the broker learns it from its name servers (``update_ha_master_address``)
            address = self.ha_master_address
            _require(
                address is None or (isinstance(address, str) and address.rpartition(":")[2].isdigit()),
                f"a SLAVE needs ha_master_address as 'host:port', not {address!r}",
            )
            _require(
                not self.transient_store_pool_enable,
                "a SLAVE appends its master's bytes directly: transient_store_pool_enable must be off",
            )

    @property
    def consume_queue_segment_size(self) -> int:
        """Bytes in one consume-queue segment file (RocketMQ's mappedFileSizeConsumeQueue)."""
        return self.consume_queue_entries * 20

    @property
    def index_file_size(self) -> int:
        """Bytes in one index file: header + slots + entries."""
        return 40 + self.index_hash_slots * 4 + self.index_max_entries * 20

    @property
    def puts_wait(self) -> bool:
        """Whether a put returns only once it is durable: flushed (SYNC_FLUSH) or held by a slave
        (SYNC_MASTER). A caller that must not block (an event loop) puts with ``wait=False`` and
        has the wait made elsewhere: ``MessageStore.wait_durable`` on another thread, or
        ``when_flushed``'s callback."""
        return self.flush_disk_type is FlushDiskType.SYNC_FLUSH or self.broker_role is BrokerRole.SYNC_MASTER

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_levels_ms)

    def replace(self, **changes: Any) -> StoreConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> StoreConfig:
        """Build from a mapping whose keys are field names or RocketMQ camelCase names (a
        ``broker.conf``'s: see the module docstring). Raises StoreConfigError naming unknown keys."""
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        kwargs: dict[str, Any] = {}
        ignored: dict[str, str] = {}
        unknown = []
        for key, raw in values.items():
            name, convert = _ROCKETMQ_NAMES.get(key, (key, None))
            if name in fields:
                value = convert(raw) if convert else raw
                kwargs[name] = _coerce(name, fields[name].type, value)
            elif key == "storePathCommitLog" or key == "enableDLegerCommitLog":
                continue  # checked below, once the root is known
            elif key in OLD_SPELLINGS:
                ignored[key] = (
                    f"an old spelling RocketMQ 4.9 ignores too (its setting is {OLD_SPELLINGS[key]}); "
                    "an existing store's sizes are read from its files"
                )
            elif key in STORE_KEYS:
                ignored[key] = "a RocketMQ store setting for a feature rocketstore does not have"
            elif key in BROKER_KEYS:
                ignored[key] = "a broker setting, not the store's"
            else:
                unknown.append(key)
        if unknown:
            known = [*fields, *_ROCKETMQ_NAMES, *STORE_KEYS, *BROKER_KEYS]
            raise StoreConfigError(
                "unknown setting(s), neither rocketstore's nor RocketMQ 4.9's: "
                + ", ".join(_with_suggestion(key, known) for key in sorted(unknown))
            )
        _check_rocketmq_layout(values, kwargs.get("store_path_root_dir"))
        config = cls(**kwargs)
        object.__setattr__(config, "ignored_keys", ignored)
        return config

    @classmethod
    def from_file(cls, path: str | Path) -> StoreConfig:
        """Load a ``.toml`` file, or a Java ``.properties`` file (``key=value`` lines)."""
        return cls.from_mapping(read_settings_file(path))


def read_settings_file(path: str | Path) -> dict[str, Any]:
    """The settings of a ``.toml`` file (its tables as nested dicts), or of a Java
    ``.properties`` file such as RocketMQ's ``broker.conf`` (read as ``java.util.Properties``
    reads it: ``properties.py``; all values strings), for ``from_mapping``; an unreadable or
    malformed file is a ``StoreConfigError``."""
    p = Path(path)
    if p.exists() and not p.is_file():  # a FIFO would block the read
        raise StoreConfigError(f"config file {str(p)!r} is not a regular file")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise StoreConfigError(f"cannot read config file {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise StoreConfigError(f"config file {str(p)!r} is not UTF-8 text: {exc.reason}") from None
    return parse_settings_text(text, p)


def parse_settings_text(text: str, path: str | Path) -> dict[str, Any]:
    """``read_settings_file`` of ``text`` as the content of ``path`` (its suffix says the format)."""
    p = Path(path)
    if p.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
        try:
            data: dict[str, Any] = tomllib.loads(text)
            return data
        except tomllib.TOMLDecodeError as exc:
            raise StoreConfigError(f"{p}: {exc}") from None
    return properties.parse(text, str(p))


def _with_suggestion(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    return f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)


def _check_rocketmq_layout(values: Mapping[str, Any], root: str | None) -> None:
    """Refuse the RocketMQ layouts rocketstore cannot open: a commitlog outside the store
    directory, or a DLedger (Raft) commitlog, whose records are wrapped in DLedger entries."""
    commitlog = values.get("storePathCommitLog")
    if commitlog is not None:
        where = os.path.join(root, "commitlog") if root is not None else None
        if where is None or os.path.normpath(str(commitlog)) != os.path.normpath(where):
            raise StoreConfigError(
                f"storePathCommitLog={commitlog}: rocketstore keeps the commitlog in the store directory's "
                "commitlog/ (storePathRootDir/commitlog, RocketMQ 4.9's default); give storePathRootDir "
                "and leave storePathCommitLog out, or set it to storePathRootDir/commitlog"
            )
    if str(values.get("enableDLegerCommitLog", "false")).strip().lower() == "true":
        raise StoreConfigError(
            "enableDLegerCommitLog=true: a DLedger commitlog wraps records in Raft entries, a format "
            "rocketstore does not read; it opens RocketMQ's plain commitlog only"
        )


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise StoreConfigError(message)


def _coerce(name: str, type_name: Any, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if type_name == "int | None":
        type_name = "int"
    if type_name in ("int", int):
        number = decimal_int(value)
        if number is None:
            raise StoreConfigError(f"{name} must be an integer, not {value!r}")
        return number
    if type_name in ("bool", bool):
        if value.lower() in ("true", "1", "yes", "on"):
            return True
        if value.lower() in ("false", "0", "no", "off"):
            return False
        raise StoreConfigError(f"{name} must be true or false, not {value!r}")
    return value


def decimal_int(text: str) -> int | None:
    """``text``, blanks around it aside, as a setting's integer: a Java long's text
    (``parse_java_long``); else None."""
    return parse_java_long(text.strip())


def _parse_delay_levels(spec: str) -> tuple[int, ...]:
    levels = []
    for item in spec.split():
        unit = _DELAY_UNITS_MS.get(item[-1:])
        if unit is None or not (item[:-1].isascii() and item[:-1].isdigit()):
            raise StoreConfigError(f"message_delay_level: bad level {item!r} (want e.g. '1s 5m 2h')")
        levels.append(int(item[:-1]) * unit)
    if not levels:
        raise StoreConfigError("message_delay_level must name at least one level")
    return tuple(levels)


def _cq_bytes_to_entries(value: Any) -> int:
    size = int(value)
    if size % 20:
        raise StoreConfigError(f"mappedFileSizeConsumeQueue must be a multiple of 20, not {size}")
    return size // 20


def _octal(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip().lower().removeprefix("0o")
    if not (text.isascii() and text.isdigit()):
        raise StoreConfigError(f"permission bits must be octal (e.g. 0o640), not {value!r}")
    try:
        return int(text, 8)
    except ValueError:
        raise StoreConfigError(f"permission bits must be octal (e.g. 0o640), not {value!r}") from None


_ROCKETMQ_NAMES: dict[str, tuple[str, Any]] = {
    # rocketstore's own (RocketMQ has no such settings), octal in either spelling
    "file_mode": ("file_mode", _octal),
    "dir_mode": ("dir_mode", _octal),
    "fileMode": ("file_mode", _octal),
    "dirMode": ("dir_mode", _octal),
    "mappedFileSizeCommitLog": ("commitlog_segment_size", int),
    "mappedFileSizeConsumeQueue": ("consume_queue_entries", _cq_bytes_to_entries),
    "maxHashSlotNum": ("index_hash_slots", int),
    "maxIndexNum": ("index_max_entries", int),
    "maxMessageSize": ("max_message_size", int),
    "defaultTopicQueueNums": ("default_topic_queue_nums", int),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval", int),
    "flushDiskType": ("flush_disk_type", None),
    "flushIntervalCommitLog": ("flush_interval", int),
    "flushCommitLogLeastPages": ("flush_least_pages", int),
    "flushCommitLogThoroughInterval": ("flush_thorough_interval", int),
    "flushCommitLogTimed": ("flush_commit_log_timed", None),
    "commitIntervalCommitLog": ("commit_interval", int),
    "commitCommitLogLeastPages": ("commit_least_pages", int),
    "commitCommitLogThoroughInterval": ("commit_thorough_interval", int),
    "transientStorePoolEnable": ("transient_store_pool_enable", None),
    "transientStorePoolSize": ("transient_store_pool_size", int),
    "syncFlushTimeout": ("sync_flush_timeout", int),
    "flushIntervalConsumeQueue": ("flush_consume_queue_interval", int),
    "flushConsumeQueueLeastPages": ("flush_consume_queue_least_pages", int),
    "flushConsumeQueueThoroughInterval": ("flush_consume_queue_thorough_interval", int),
    "warmMapedFileEnable": ("warm_mapped_file_enable", None),
    "osPageCacheBusyTimeOutMills": ("os_page_cache_busy_timeout", int),
    "messageIndexEnable": ("message_index_enable", None),
    "messageIndexSafe": ("message_index_safe", None),
    "checkCRCOnRecover": ("check_crc_on_recover", None),
    "deleteWhen": ("delete_when", str),
    "fileReservedTime": ("file_reserved_time", int),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", int),
    "cleanResourceInterval": ("clean_resource_interval", int),
    "deleteCommitLogFilesInterval": ("delete_commitlog_files_interval", int),
    "deleteConsumeQueueFilesInterval": ("delete_consume_queue_files_interval", int),
    "destroyMapedFileIntervalForcibly": ("destroy_mapped_file_interval_forcibly", int),
    "defaultQueryMaxNum": ("default_query_max_num", int),
    "maxTransferBytesOnMessageInMemory": ("max_transfer_bytes_on_message_in_memory", int),
    "maxTransferCountOnMessageInMemory": ("max_transfer_count_on_message_in_memory", int),
    "messageDelayLevel": ("message_delay_level", str),
    "timerWheelEnable": ("timer_wheel_enable", None),
    "timerPrecisionMs": ("timer_precision_ms", int),
    "timerMaxDelaySec": ("timer_max_delay_sec", int),
    "timerRollWindowSlot": ("timer_roll_window_slots", int),
    "mappedFileSizeTimerLog": ("timer_log_segment_size", int),
    "timerFlushIntervalMs": ("timer_flush_interval", int),
    "storePathRootDir": ("store_path_root_dir", str),
    "brokerRole": ("broker_role", str),
    "haListenPort": ("ha_listen_port", int),
    "haMasterAddress": ("ha_master_address", str),
    "haSendHeartbeatInterval": ("ha_send_heartbeat_interval", int),
    "haHousekeepingInterval": ("ha_housekeeping_interval", int),
    "haTransferBatchSize": ("ha_transfer_batch_size", int),
    "haSlaveFallbehindMax": ("ha_slave_fallbehind_max", int),
    "slaveTimeout": ("slave_timeout", int),
}
