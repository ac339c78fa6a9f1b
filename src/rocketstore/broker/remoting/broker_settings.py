"""The broker's settings as RocketMQ 4.9.8's broker shows and changes them over remoting:
GET_BROKER_CONFIG (``mqadmin getBrokerConfig``) and UPDATE_BROKER_CONFIG (``mqadmin
updateBrokerConfig``).

GET_BROKER_CONFIG shows every key RocketMQ's broker shows (its ``BrokerConfig``,
``NettyServerConfig``, ``NettyClientConfig`` and ``MessageStoreConfig``): rocketstore's own value
where it has the setting, the value that describes what rocketstore does where it has no such
setting but the key states a behaviour (a feature it lacks is ``false``), and RocketMQ's
default otherwise (thread pools and buffers rocketstore does not have).

UPDATE_BROKER_CONFIG changes only the settings rocketstore applies while it runs (``LIVE``), on
both its doors at once, and writes them to the file ``serve --config`` read, as RocketMQ's broker
rewrites its ``broker.conf``, so a restart keeps them. Any other key is refused naming it (RocketMQ
takes every key and applies most only at its next start, or never).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rocketstore import properties
from rocketstore.broker.config import BrokerConfig, load_settings
from rocketstore.config import BrokerRole
from rocketstore.errors import StoreConfigError
from rocketstore.storage.paths import atomic_write

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["LIVE", "SettingRefused", "broker_settings", "parse_update", "persist"]

# RocketMQ 4.9.8's defaults of the keys rocketstore has no setting for (BrokerConfig,
# NettyServerConfig, NettyClientConfig, MessageStoreConfig)
_ROCKETMQ_DEFAULTS: Final = {
    "accessMessageInMemoryMaxRatio": "40",
    "adminBrokerThreadPoolNums": "16",
    "autoDeleteUnusedStats": "false",
    "bitMapLengthConsumeQueueExt": "112",
    "brokerTopicEnable": "true",
    "clientAsyncSemaphoreValue": "65535",
    "clientCallbackExecutorThreads": "2",
    "clientChannelMaxIdleTimeSeconds": "120",
    "clientCloseSocketIfTimeout": "true",
    "clientManagerThreadPoolQueueCapacity": "1000000",
    "clientManageThreadPoolNums": "32",
    "clientOnewaySemaphoreValue": "65535",
    "clientPooledByteBufAllocatorEnable": "false",
    "clientSocketRcvBufSize": "0",
    "clientSocketSndBufSize": "0",
    "clientWorkerThreads": "4",
    "clusterTopicEnable": "true",
    "commercialBaseCount": "1",
    "commercialBigCount": "1",
    "commercialEnable": "true",
    "commercialTimerCount": "1",
    "commercialTransCount": "1",
    "compressedRegister": "false",
    "configBlackList": "configBlackList;brokerConfigPath",
    "connectTimeoutMillis": "3000",
    "consumerFallbehindThreshold": "17179869184",
    "consumerManagerThreadPoolQueueCapacity": "1000000",
    "consumerManageThreadPoolNums": "32",
    "debugLockEnable": "false",
    "disableConsumeIfConsumerReadSlowly": "false",
    "diskFallRecorded": "true",
    "enableDetailStat": "true",
    "enableScheduleMessageStats": "true",
    "endTransactionPoolQueueCapacity": "100000",
    "endTransactionThreadPoolNums": "12",
    "expectConsumerNumUseFilter": "32",
    "fastFailIfNoBufferInStorePool": "false",
    "filterDataCleanTimeSpan": "86400000",
    "filterServerNums": "0",
    "flushConsumerOffsetHistoryInterval": "60000",
    "flushDelayOffsetInterval": "10000",
    "flushLeastPagesWhenWarmMapedFile": "4096",
    "forceRegister": "true",
    "heartbeatThreadPoolNums": "2",
    "heartbeatThreadPoolQueueCapacity": "50000",
    "mappedFileSizeConsumeQueueExt": "50331648",
    "maxDelayTime": "40",
    "maxErrorRateOfBloomFilter": "20",
    "maxLmqConsumeQueueNum": "20000",
    "maxMsgsNumBatch": "64",
    "messageStorePlugIn": "",
    "msgTraceTopicName": "RMQ_SYS_TRACE_TOPIC",
    "processReplyMessageThreadPoolNums": "20",
    "pullMessageThreadPoolNums": "20",
    "pullThreadPoolQueueCapacity": "100000",
    "putMessageFutureThreadPoolNums": "2",
    "putMsgIndexHightWater": "600000",
    "putThreadPoolQueueCapacity": "10000",
    "queryMessageThreadPoolNums": "10",
    "queryThreadPoolQueueCapacity": "20000",
    "redeleteHangedFileInterval": "120000",
    "regionId": "DefaultRegion",
    "registerBrokerTimeoutMills": "6000",
    "registerNameServerPeriod": "30000",
    "replyThreadPoolQueueCapacity": "10000",
    "scheduleAsyncDeliverMaxPendingLimit": "2000",
    "scheduleAsyncDeliverMaxResendNum2Blocked": "3",
    "sendMessageThreadPoolNums": "2",
    "sendThreadPoolQueueCapacity": "10000",
    "serverAsyncSemaphoreValue": "64",
    "serverCallbackExecutorThreads": "0",
    "serverOnewaySemaphoreValue": "256",
    "serverPooledByteBufAllocatorEnable": "true",
    "serverSelectorThreads": "3",
    "serverSocketBacklog": "1024",
    "serverSocketRcvBufSize": "0",
    "serverSocketSndBufSize": "0",
    "serverWorkerThreads": "8",
    "shortPollingTimeMills": "1000",
    "startAcceptSendRequestTimeStamp": "0",
    "traceOn": "true",
    "transferMsgByHeap": "true",
    "useEpollNativeSelector": "false",
    "useReentrantLockWhenPutMessage": "true",
    "waitTimeMillsInHeartbeatQueue": "31000",
    "waitTimeMillsInPullQueue": "5000",
    "waitTimeMillsInSendQueue": "200",
    "waitTimeMillsInTransactionQueue": "3000",
    "writeBufferHighWaterMark": "0",
    "writeBufferLowWaterMark": "0",
}

# keys that state a behaviour: what rocketstore does (it has no switch for them)
_BEHAVIOUR: Final = {
    "longPollingEnable": "true",
    "notifyConsumerIdsChangedEnable": "true",
    "cleanFileForciblyEnable": "true",
    "offsetCheckInSlave": "false",
    "slaveReadEnable": "false",  # pulls always suggest the master
    "enableDLegerCommitLog": "false",
    "duplicationEnable": "false",
    "enableLmq": "false",
    "enableMultiDispatch": "false",
    "enableConsumeQueueExt": "false",
    "enableCalcFilterBitMap": "false",
    "enablePropertyFilter": "false",  # SQL92 subscriptions are refused
    "filterSupportRetry": "false",
    "isEnableBatchPush": "false",
    "enableScheduleAsyncDeliver": "false",
    "storeReplyMessageEnable": "false",  # no request-reply (SEND_REPLY_MESSAGE)
    "traceTopicEnable": "false",  # RMQ_SYS_TRACE_TOPIC is not created at start
    "brokerFastFailureEnable": "false",  # no SYSTEM_BUSY for requests queued too long
    "rejectTransactionMessage": "false",
    "highSpeedMode": "false",
    "isolateLogEnable": "false",
    "fetchNamesrvAddrByAddressServer": "false",
    "useTLS": "false",  # the remoting door has no TLS
}

# StoreConfig fields under RocketMQ's names (values as RocketMQ writes them)
_STORE_FIELDS: Final = {
    "storePathRootDir": "store_path_root_dir",
    "mappedFileSizeCommitLog": "commitlog_segment_size",
    "maxMessageSize": "max_message_size",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "flushDiskType": "flush_disk_type",
    "brokerRole": "broker_role",
    "syncFlushTimeout": "sync_flush_timeout",
    "flushIntervalCommitLog": "flush_interval",
    "flushCommitLogLeastPages": "flush_least_pages",
    "flushCommitLogThoroughInterval": "flush_thorough_interval",
    "flushCommitLogTimed": "flush_commit_log_timed",
    "commitIntervalCommitLog": "commit_interval",
    "commitCommitLogLeastPages": "commit_least_pages",
    "commitCommitLogThoroughInterval": "commit_thorough_interval",
    "transientStorePoolEnable": "transient_store_pool_enable",
    "transientStorePoolSize": "transient_store_pool_size",
    "flushIntervalConsumeQueue": "flush_consume_queue_interval",
    "flushConsumeQueueLeastPages": "flush_consume_queue_least_pages",
    "flushConsumeQueueThoroughInterval": "flush_consume_queue_thorough_interval",
    "warmMapedFileEnable": "warm_mapped_file_enable",
    "osPageCacheBusyTimeOutMills": "os_page_cache_busy_timeout",
    "messageIndexEnable": "message_index_enable",
    "messageIndexSafe": "message_index_safe",
    "checkCRCOnRecover": "check_crc_on_recover",
    "deleteWhen": "delete_when",
    "fileReservedTime": "file_reserved_time",
    "diskMaxUsedSpaceRatio": "disk_max_used_space_ratio",
    "cleanResourceInterval": "clean_resource_interval",
    "deleteCommitLogFilesInterval": "delete_commitlog_files_interval",
    "deleteConsumeQueueFilesInterval": "delete_consume_queue_files_interval",
    "destroyMapedFileIntervalForcibly": "destroy_mapped_file_interval_forcibly",
    "maxHashSlotNum": "index_hash_slots",
    "maxIndexNum": "index_max_entries",
    "defaultQueryMaxNum": "default_query_max_num",
    "maxTransferBytesOnMessageInMemory": "max_transfer_bytes_on_message_in_memory",
    "maxTransferCountOnMessageInMemory": "max_transfer_count_on_message_in_memory",
    # one limit wherever the message lies (RocketMQ has a smaller one for messages on disk)
    "maxTransferBytesOnMessageInDisk": "max_transfer_bytes_on_message_in_memory",
    "maxTransferCountOnMessageInDisk": "max_transfer_count_on_message_in_memory",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval",
    "messageDelayLevel": "message_delay_level",
    "haMasterAddress": "ha_master_address",
    "haSendHeartbeatInterval": "ha_send_heartbeat_interval",
    "haHousekeepingInterval": "ha_housekeeping_interval",
    "haTransferBatchSize": "ha_transfer_batch_size",
    "haSlaveFallbehindMax": "ha_slave_fallbehind_max",
    "slaveTimeout": "slave_timeout",
}

# BrokerConfig fields under RocketMQ's names
_BROKER_FIELDS: Final = {
    "brokerClusterName": "cluster_name",
    "brokerName": "broker_name",
    "autoCreateTopicEnable": "auto_create_topic",
    "autoCreateSubscriptionGroup": "auto_create_group",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "transactionCheckMax": "transaction_check_max",
}

# what UPDATE_BROKER_CONFIG may change: read by both doors at each request or check
LIVE: Final = {
    "autoCreateTopicEnable": "auto_create_topic",
    "brokerPermission": "broker_permission",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "transactionCheckMax": "transaction_check_max",
}


_EXPECTED: Final = {
    "autoCreateTopicEnable": "true or false",
    "brokerPermission": "6 (read and write), 4 (read) or 2 (write)",
    "transactionTimeOut": "milliseconds (a non-negative integer)",
    "transactionCheckInterval": "milliseconds (a non-negative integer)",
    "transactionCheckMax": "a non-negative integer",
}
# the checks' timer runs this often at most (a client could otherwise make it spin)
_MIN_CHECK_INTERVAL_MS: Final = 1000


def _clip(text: str, limit: int = 64) -> str:
    """A client's text in an answer, cut short: answers stay small whatever was sent."""
    return text if len(text) <= limit else text[:limit] + "..."


class SettingRefused(ValueError):
    """An UPDATE_BROKER_CONFIG this broker does not apply (the message says why)."""


def _shown(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(getattr(value, "value", value))  # enums by their RocketMQ name


def broker_settings(config: BrokerConfig, store: MessageStore, broker_address: str) -> dict[str, str]:
    """Every key RocketMQ's broker shows, with the values described in the module docstring."""
    store_config = store.config
    host, _, port = broker_address.rpartition(":")
    root = Path(store_config.store_path_root_dir or store.layout.root)
    values = dict(_ROCKETMQ_DEFAULTS)
    values.update(_BEHAVIOUR)
    for key, attr in _STORE_FIELDS.items():
        value = getattr(store_config, attr)
        if value is not None:  # RocketMQ leaves out settings that are null
            values[key] = _shown(value)
    for key, attr in _BROKER_FIELDS.items():
        values[key] = _shown(getattr(config, attr))
    slave = store_config.broker_role is BrokerRole.SLAVE
    values.update(
        {
            "storePathRootDir": str(root),
            "storePathCommitLog": str(root / "commitlog"),
            "mappedFileSizeConsumeQueue": str(store_config.consume_queue_entries * 20),
            "brokerId": "1" if slave else "0",
            "brokerIP1": host.strip("[]"),
            "brokerIP2": host.strip("[]"),
            "listenPort": port,
            "haListenPort": _shown(store.ha_port),
            "brokerPermission": "4" if store.readonly else str(config.broker_permission),
            "aclEnable": _shown(config.acl_file is not None),
            "maxMessageSize": str(min(store_config.max_message_size, config.max_body_size)),
            "serverChannelMaxIdleTimeSeconds": str(config.idle_timeout_ms // 1000),
            "channelNotActiveInterval": str(config.idle_timeout_ms // 2),
            "rocketmqHome": "",
        }
    )
    if config.namesrv is not None:
        values["namesrvAddr"] = config.namesrv
    return values


def parse_update(body: bytes, config: BrokerConfig) -> tuple[dict[str, str], dict[str, object]]:
    """The ``key=value`` pairs of an UPDATE_BROKER_CONFIG body: (RocketMQ key -> text to
    persist, BrokerConfig field -> new value). SettingRefused names a key that cannot change
    while the broker runs, or a value that is not valid for its key."""
    try:
        pairs = properties.parse(body.decode("utf-8", "replace"), "the request's body")
    except StoreConfigError as exc:
        raise SettingRefused(_clip(str(exc), 200)) from None
    refused = sorted(k for k in pairs if k not in LIVE)
    if refused:
        named = ", ".join(_clip(k) for k in refused[:10])
        if len(refused) > 10:
            named += f" and {len(refused) - 10} more"
        raise SettingRefused(
            f"can not update {named} while the broker runs (it changes live: "
            f"{', '.join(sorted(LIVE))}); set it in the config file and restart"
        )
    changes: dict[str, object] = {}
    for key, value in pairs.items():
        try:
            changes[LIVE[key]] = getattr(BrokerConfig.from_mapping({key: value}), LIVE[key])
        except StoreConfigError:
            raise SettingRefused(f"{key}={_clip(value)}: expected {_EXPECTED[key]}") from None
    interval = changes.get("transaction_check_interval_ms")
    if isinstance(interval, int) and interval < _MIN_CHECK_INTERVAL_MS:
        raise SettingRefused(f"transactionCheckInterval={interval}: at least {_MIN_CHECK_INTERVAL_MS} ms")
    try:
        config.replace(**changes)
    except StoreConfigError as exc:
        raise SettingRefused(str(exc)) from None
    return {k: _shown(changes[LIVE[k]]) for k in pairs}, changes


def _key_lines(lines: list[str], names: set[str], toml: bool) -> list[range]:
    """The lines setting one of ``names`` (a properties line may span several)."""
    if toml:
        keys = "|".join(map(re.escape, names))
        pattern = re.compile(r"""^\s*(["']?)(""" + keys + r")\1\s*=")
        return [range(i, i + 1) for i, text in enumerate(lines) if pattern.match(text)]
    return [
        range(first, first + span)
        for first, span, line in properties.logical_lines("\n".join(lines))
        if properties.parse_line(line)[0] in names
    ]


def persist(path: str | Path, pairs: Mapping[str, str]) -> None:
    """Write ``pairs`` (keys of ``LIVE``) into the settings file ``path``: each key's line (under
    its RocketMQ name or rocketstore's) is replaced, other lines kept; a key it lacks is added
    (in a TOML file, before its first table, where the broker's keys are read). The new text is
    read as ``serve`` reads the file before it replaces it: StoreConfigError, the file untouched,
    when it would not load or would not give these values."""
    p = Path(path)
    lines = properties.natural_lines(p.read_text(encoding="utf-8"))
    toml = p.suffix == ".toml"
    for key, value in pairs.items():
        line = f"{key} = {value}" if toml else properties.format_line(key, value)
        found = _key_lines(lines, {key, LIVE[key]}, toml)
        if found:
            for span in reversed(found[1:]):
                del lines[span.start : span.stop]
            lines[found[0].start : found[0].stop] = [line]
        elif toml:
            at = next((i for i, t in enumerate(lines) if t.lstrip().startswith("[")), len(lines))
            while at > 0 and not lines[at - 1].strip():  # after the top-level keys, not the gap
                at -= 1
            lines.insert(at, line)
        else:
            lines.append(line)
    text = "\n".join(lines) + "\n"
    try:
        _, broker = load_settings(p, text)
    except StoreConfigError as exc:
        raise StoreConfigError(f"{p} would not load with the change ({exc}); nothing changed") from None
    wrong = [
        f"{key} would read {_shown(getattr(broker, LIVE[key]))}"
        for key, value in pairs.items()
        if _shown(getattr(broker, LIVE[key])) != value
    ]
    if wrong:
        named = ", ".join(wrong)
        raise StoreConfigError(f"{p}: with the change {named} (set elsewhere in it); nothing changed")
    atomic_write(p, text.encode("utf-8"), mode=p.stat().st_mode & 0o777)
