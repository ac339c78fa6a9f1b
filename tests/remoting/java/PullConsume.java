import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * A DefaultMQPullConsumer that reads every queue of a topic from its stored offset (or 0) to its end,
 * prints one "consumed" event per message and a "queue" event per queue (min, max, next offset), stores and
 * persists the offsets it reached, and shuts down.
 * Args: namesrv= group= topic= [sub=*] [max=32 (maxNums per pull)]
 */
public final class PullConsume {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Out.args(argv);
        String topic = Out.need(a, "topic");
        int max = Integer.parseInt(Out.get(a, "max", "32"));
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(Out.need(a, "group"));
        consumer.setNamesrvAddr(Out.need(a, "namesrv"));
        consumer.setRegisterTopics(new java.util.HashSet<>(java.util.Collections.singleton(topic)));
        consumer.start();
        try {
            Set<MessageQueue> queues = new TreeSet<>(consumer.fetchSubscribeMessageQueues(topic));
            for (MessageQueue mq : queues) {
                long offset = Math.max(0, consumer.fetchConsumeOffset(mq, true));
                long minOffset = consumer.minOffset(mq);
                long maxOffset = consumer.maxOffset(mq);
                for (int pulls = 0; ; pulls++) {
                    if (pulls > 100000) {
                        throw new IllegalStateException("queue " + mq + " never ends");
                    }
                    PullResult r = consumer.pull(mq, Out.get(a, "sub", "*"), offset, max);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        for (MessageExt m : r.getMsgFoundList()) {
                            Out.emit("consumed", "topic", m.getTopic(),
                                "body", new String(m.getBody(), StandardCharsets.UTF_8), "msgId", m.getMsgId(),
                                "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(), "tags", m.getTags(),
                                "keys", m.getKeys());
                        }
                    }
                    if (r.getNextBeginOffset() == offset && r.getPullStatus() != PullStatus.FOUND) {
                        Out.emit("queue", "queueId", mq.getQueueId(), "status", r.getPullStatus().name(),
                            "minOffset", minOffset, "maxOffset", maxOffset, "next", offset);
                        break;
                    }
                    offset = r.getNextBeginOffset();
                    consumer.updateConsumeOffset(mq, offset);
                }
            }
            // synchronously (persistConsumerOffset sends oneway, and only for queues a rebalance assigned)
            for (MessageQueue mq : queues) {
                long offset = consumer.getDefaultMQPullConsumerImpl().getOffsetStore().readOffset(mq,
                    org.apache.rocketmq.client.consumer.store.ReadOffsetType.READ_FROM_MEMORY);
                if (offset >= 0) {
                    ((org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore)
                        consumer.getDefaultMQPullConsumerImpl().getOffsetStore()).updateConsumeOffsetToBroker(
                        mq, offset, false);
                }
            }
            Out.emit("done");
        } catch (Exception e) {
            Out.emit("error", "error", Out.describe(e));
        } finally {
            consumer.shutdown();
        }
    }
}
