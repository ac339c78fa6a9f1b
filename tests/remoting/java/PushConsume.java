import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore;
import org.apache.rocketmq.client.impl.consumer.DefaultMQPushConsumerImpl;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A DefaultMQPushConsumer (CLUSTERING) that prints one "consumed" event per delivery and stops once expect=N
 * deliveries were consumed successfully (or after timeout= seconds: event "timeout").
 * Args: namesrv= group= topic= [sub=*] [orderly=false] [expect=10] [timeout=120] [from=first|last]
 *       [fail=BODY,BODY (answer RECONSUME_LATER for these bodies...)] [failTimes=N (...while reconsumeTimes < N)]
 *       [retryDelay=LEVEL (delay level of the next attempt; -1 = straight to the DLQ)] [maxReconsume=N] [ak= sk=]
 *       [instance=NAME] [commit=sync (once done, wait for the consume threads and commit each queue's offset with a
 *       synchronous request before shutting down, whose own commit is oneway)]
 */
public final class PushConsume {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Out.args(argv);
        int expect = Integer.parseInt(Out.get(a, "expect", "10"));
        int failTimes = Integer.parseInt(Out.get(a, "failTimes", "0"));
        Set<String> fail = new HashSet<>(Arrays.asList(Out.get(a, "fail", "").split(",")));
        String retryDelay = a.get("retryDelay");
        CountDownLatch done = new CountDownLatch(expect);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(Out.need(a, "group"), Out.hook(a), new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(Out.need(a, "namesrv"));
        if (a.containsKey("instance")) {
            consumer.setInstanceName(a.get("instance"));
        }
        consumer.setConsumeFromWhere("last".equals(Out.get(a, "from", "first"))
            ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        if (a.containsKey("maxReconsume")) {
            consumer.setMaxReconsumeTimes(Integer.parseInt(a.get("maxReconsume")));
        }
        consumer.subscribe(Out.need(a, "topic"), Out.get(a, "sub", "*"));
        // the latch opens inside the listener, before the consume thread records the offset; without a graceful
        // wait, shutdown persists offsets that miss the last deliveries
        consumer.setAwaitTerminationMillisWhenShutdown(10_000);
        if (Boolean.parseBoolean(Out.get(a, "orderly", "false"))) {
            consumer.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    consumed(m, "orderly");
                    done.countDown();
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                boolean later = false;
                for (MessageExt m : msgs) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    boolean failing = fail.contains(body) && m.getReconsumeTimes() < failTimes;
                    consumed(m, failing ? "later" : "ok");
                    later |= failing;
                }
                if (later) {
                    if (retryDelay != null) {
                        ctx.setDelayLevelWhenNextConsume(Integer.parseInt(retryDelay));
                    }
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                for (int i = 0; i < msgs.size(); i++) {
                    done.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.setConsumeMessageBatchMaxSize(1);
        }
        consumer.start();
        Out.emit("started", "clientId", consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId());
        boolean all = done.await(Integer.parseInt(Out.get(a, "timeout", "120")), TimeUnit.SECONDS);
        Out.emit(all ? "done" : "timeout");
        if (all && "sync".equals(a.get("commit"))) {
            commitSync(consumer);
        }
        consumer.shutdown();
        Out.emit("stopped");
    }

    /** Waits (10 s at most) until no delivered message is still being consumed, then stores each queue's offset
     *  with a request answered by the broker: shutdown's own commit is oneway, and a loaded broker may apply it
     *  after a pull's older commit offset. */
    static void commitSync(DefaultMQPushConsumer consumer) throws Exception {
        DefaultMQPushConsumerImpl impl = consumer.getDefaultMQPushConsumerImpl();
        Map<MessageQueue, ProcessQueue> queues = impl.getRebalanceImpl().getProcessQueueTable();
        long deadline = System.currentTimeMillis() + 10_000;
        while (queues.values().stream().anyMatch(q -> q.getMsgCount().get() > 0) && System.currentTimeMillis() < deadline) {
            Thread.sleep(10);
        }
        RemoteBrokerOffsetStore offsets = (RemoteBrokerOffsetStore) impl.getOffsetStore();
        for (MessageQueue mq : queues.keySet()) {
            long offset = offsets.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY);
            if (offset >= 0) {
                offsets.updateConsumeOffsetToBroker(mq, offset, false);
            }
        }
    }

    static void consumed(MessageExt m, String result) {
        Out.emit("consumed", "result", result, "topic", m.getTopic(),
            "body", new String(m.getBody(), StandardCharsets.UTF_8), "msgId", m.getMsgId(),
            "offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null, "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(),
            "reconsumeTimes", m.getReconsumeTimes(), "tags", m.getTags(), "keys", m.getKeys(),
            "retryTopic", m.getProperty("RETRY_TOPIC"), "thread", Thread.currentThread().getName());
    }
}
