"""The setting names RocketMQ 4.9's broker reads from its ``broker.conf``.

``BrokerStartup`` hands the file's properties to four objects (``MixAll.properties2Object``): a key
is a setting when one of them has a setter for it, and any other key is skipped without a word.
These are those names in RocketMQ 4.9.8: ``BrokerConfig``, ``NettyServerConfig`` and
``NettyClientConfig`` (``BROKER_KEYS``: the broker's business, never the store's) and
``MessageStoreConfig`` (``STORE_KEYS``: the store's, of which ``config.py`` reads the ones rocketstore
implements). ``StoreConfig.from_file`` uses them to accept a stock ``broker.conf`` while refusing a
key that none of them names, a typo RocketMQ would ignore silently.
"""

from __future__ import annotations

__all__ = ["BROKER_KEYS", "OLD_SPELLINGS", "STORE_KEYS"]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


BROKER_KEYS = _names(
    """
    aclEnable adminBrokerThreadPoolNums autoCreateSubscriptionGroup autoCreateTopicEnable
    autoDeleteUnusedStats brokerClusterName brokerFastFailureEnable brokerIP1 brokerIP2 brokerId
    brokerName brokerPermission brokerTopicEnable channelNotActiveInterval clientAsyncSemaphoreValue
    clientCallbackExecutorThreads clientChannelMaxIdleTimeSeconds clientCloseSocketIfTimeout
    clientManageThreadPoolNums clientManagerThreadPoolQueueCapacity clientOnewaySemaphoreValue
    clientPooledByteBufAllocatorEnable clientSocketRcvBufSize clientSocketSndBufSize clientWorkerThreads
    clusterTopicEnable commercialBaseCount commercialBigCount commercialEnable commercialTimerCount
    commercialTransCount compressedRegister configBlackList connectTimeoutMillis
    consumerFallbehindThreshold consumerManageThreadPoolNums consumerManagerThreadPoolQueueCapacity
    defaultTopicQueueNums disableConsumeIfConsumerReadSlowly enableCalcFilterBitMap enableDetailStat
    enablePropertyFilter endTransactionPoolQueueCapacity endTransactionThreadPoolNums
    expectConsumerNumUseFilter fetchNamesrvAddrByAddressServer filterDataCleanTimeSpan filterServerNums
    filterSupportRetry flushConsumerOffsetHistoryInterval flushConsumerOffsetInterval forceRegister
    heartbeatThreadPoolNums heartbeatThreadPoolQueueCapacity highSpeedMode isolateLogEnable listenPort
    longPollingEnable maxDelayTime maxErrorRateOfBloomFilter messageStorePlugIn msgTraceTopicName
    namesrvAddr notifyConsumerIdsChangedEnable processReplyMessageThreadPoolNums
    pullMessageThreadPoolNums pullThreadPoolQueueCapacity putMessageFutureThreadPoolNums
    putThreadPoolQueueCapacity queryMessageThreadPoolNums queryThreadPoolQueueCapacity regionId
    registerBrokerTimeoutMills registerNameServerPeriod rejectTransactionMessage
    replyThreadPoolQueueCapacity rocketmqHome sendMessageThreadPoolNums sendThreadPoolQueueCapacity
    serverAsyncSemaphoreValue serverCallbackExecutorThreads serverChannelMaxIdleTimeSeconds
    serverOnewaySemaphoreValue serverPooledByteBufAllocatorEnable serverSelectorThreads
    serverSocketBacklog serverSocketRcvBufSize serverSocketSndBufSize serverWorkerThreads
    shortPollingTimeMills slaveReadEnable startAcceptSendRequestTimeStamp storeReplyMessageEnable
    traceOn traceTopicEnable transactionCheckInterval transactionCheckMax transactionTimeOut
    transferMsgByHeap useEpollNativeSelector useTLS waitTimeMillsInHeartbeatQueue
    waitTimeMillsInPullQueue waitTimeMillsInSendQueue waitTimeMillsInTransactionQueue
    writeBufferHighWaterMark writeBufferLowWaterMark
    """
)

STORE_KEYS = _names(
    """
    accessMessageInMemoryMaxRatio bitMapLengthConsumeQueueExt brokerRole checkCRCOnRecover
    cleanFileForciblyEnable cleanResourceInterval commitCommitLogLeastPages
    commitCommitLogThoroughInterval commitIntervalCommitLog dLegerGroup dLegerPeers dLegerSelfId
    debugLockEnable defaultQueryMaxNum deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval
    deleteWhen destroyMapedFileIntervalForcibly diskFallRecorded diskMaxUsedSpaceRatio duplicationEnable
    enableBatchPush enableConsumeQueueExt enableDLegerCommitLog enableLmq enableMultiDispatch
    enableScheduleAsyncDeliver enableScheduleMessageStats fastFailIfNoBufferInStorePool fileReservedTime
    flushCommitLogLeastPages flushCommitLogThoroughInterval flushCommitLogTimed
    flushConsumeQueueLeastPages flushConsumeQueueThoroughInterval flushDelayOffsetInterval flushDiskType
    flushIntervalCommitLog flushIntervalConsumeQueue flushLeastPagesWhenWarmMapedFile
    haHousekeepingInterval haListenPort haMasterAddress haSendHeartbeatInterval haSlaveFallbehindMax
    haTransferBatchSize mappedFileSizeCommitLog mappedFileSizeConsumeQueue mappedFileSizeConsumeQueueExt
    maxHashSlotNum maxIndexNum maxLmqConsumeQueueNum maxMessageSize maxMsgsNumBatch
    maxTransferBytesOnMessageInDisk maxTransferBytesOnMessageInMemory maxTransferCountOnMessageInDisk
    maxTransferCountOnMessageInMemory messageDelayLevel messageIndexEnable messageIndexSafe
    offsetCheckInSlave osPageCacheBusyTimeOutMills preferredLeaderId putMsgIndexHightWater
    readOnlyCommitLogStorePaths redeleteHangedFileInterval scheduleAsyncDeliverMaxPendingLimit
    scheduleAsyncDeliverMaxResendNum2Blocked slaveTimeout storePathCommitLog storePathDLedgerCommitLog
    storePathRootDir syncFlushTimeout transientStorePoolEnable transientStorePoolSize
    useReentrantLockWhenPutMessage warmMapedFileEnable
    """
)

# Names older RocketMQ versions read, still found in broker.conf files: RocketMQ 4.9 has no setter
# for them and ignores them, so the same file gives both stores the same settings.
OLD_SPELLINGS = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
}
