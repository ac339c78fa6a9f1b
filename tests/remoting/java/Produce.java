import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * Sends count messages and prints one "sent" event per acknowledged message.
 * Args: namesrv= topic= [count=10] [mode=sync|async|oneway|batch] [group=] [tags=] [keys=PREFIX] [size=BYTES] [ak= sk=]
 *       [delay=LEVEL] [queue=ID (sync: that queue)] [prop.NAME=VALUE ...]
 *       [hold=SECONDS (after the sends, stay connected that long, printing "holding")]
 *       [timeout=MS] [latencyFault=true] [keepGoing=true (sync: a failed send prints "failed", the next is sent)]
 *       [pauseMs=MS (sync: a pause after each send, so that a stream lasts while a test acts on it)]
 * The body of message i is "body-i" padded with '.' to size bytes (when size is larger).
 */
public final class Produce {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Out.args(argv);
        String topic = Out.need(a, "topic");
        int count = Integer.parseInt(Out.get(a, "count", "10"));
        String mode = Out.get(a, "mode", "sync");
        DefaultMQProducer producer = new DefaultMQProducer(Out.get(a, "group", "test_producer_" + mode), Out.hook(a));
        producer.setNamesrvAddr(Out.need(a, "namesrv"));
        producer.setSendMsgTimeout(Integer.parseInt(Out.get(a, "timeout", "10000")));
        producer.setSendLatencyFaultEnable(Boolean.parseBoolean(Out.get(a, "latencyFault", "false")));
        producer.start();
        List<Message> messages = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, body(i, Integer.parseInt(Out.get(a, "size", "0"))));
            if (a.containsKey("tags")) {
                String[] tags = a.get("tags").split(",");
                m.setTags(tags[i % tags.length]);
            }
            if (a.containsKey("keys")) {
                m.setKeys(a.get("keys") + "-" + i);
            }
            if (a.containsKey("delay")) {
                m.setDelayTimeLevel(Integer.parseInt(a.get("delay")));
            }
            for (Map.Entry<String, String> e : a.entrySet()) {
                if (e.getKey().startsWith("prop.")) {
                    m.putUserProperty(e.getKey().substring(5), e.getValue());
                }
            }
            messages.add(m);
        }
        try {
            switch (mode) {
                case "sync": {
                    // keepGoing: a send that fails (one in flight to a broker killed under it times out)
                    // is reported and the next one sent, as an application carries on
                    boolean keepGoing = Boolean.parseBoolean(Out.get(a, "keepGoing", "false"));
                    long pause = Long.parseLong(Out.get(a, "pauseMs", "0"));
                    for (int i = 0; i < count; i++) {
                        if (i > 0 && pause > 0) {
                            Thread.sleep(pause);
                        }
                        try {
                            SendResult r = a.containsKey("queue")
                                ? producer.send(messages.get(i),
                                    (mqs, msg, queue) -> mqs.get((Integer) queue % mqs.size()),
                                    Integer.parseInt(a.get("queue")))
                                : producer.send(messages.get(i));
                            sent(i, r);
                        } catch (Exception e) {
                            if (!keepGoing) {
                                throw e;
                            }
                            Out.emit("failed", "i", i, "error", Out.describe(e));
                        }
                    }
                    break;
                }
                case "async": {
                    CountDownLatch done = new CountDownLatch(count);
                    for (int i = 0; i < count; i++) {
                        final int n = i;
                        producer.send(messages.get(i), new SendCallback() {
                            @Override
                            public void onSuccess(SendResult r) {
                                sent(n, r);
                                done.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                Out.emit("failed", "i", n, "error", e.toString());
                                done.countDown();
                            }
                        });
                    }
                    if (!done.await(120, TimeUnit.SECONDS)) {
                        Out.emit("error", "error", "async sends not answered in 120 s");
                    }
                    break;
                }
                case "oneway":
                    for (int i = 0; i < count; i++) {
                        producer.sendOneway(messages.get(i));
                        Out.emit("oneway", "i", i, "uniqKey", messages.get(i).getProperty("UNIQ_KEY"));
                    }
                    break;
                case "batch": {
                    SendResult r = producer.send(messages);
                    Out.emit("batch", "status", r.getSendStatus().name(), "msgId", r.getMsgId(),
                        "offsetMsgId", r.getOffsetMsgId(), "queueId", r.getMessageQueue().getQueueId(),
                        "queueOffset", r.getQueueOffset());
                    break;
                }
                default:
                    throw new IllegalArgumentException("mode must be sync, async, oneway or batch: " + mode);
            }
            Out.emit("done");
            int hold = Integer.parseInt(Out.get(a, "hold", "0"));
            if (hold > 0) {
                Out.emit("holding");
                Thread.sleep(hold * 1000L);
            }
        } catch (Exception e) {
            Out.emit("error", "error", Out.describe(e));
        } finally {
            producer.shutdown();
        }
    }

    static byte[] body(int i, int size) {
        StringBuilder b = new StringBuilder("body-").append(i);
        while (b.length() < size) {
            b.append('.');
        }
        return b.toString().getBytes(StandardCharsets.UTF_8);
    }

    static void sent(int i, SendResult r) {
        Out.emit("sent", "i", i, "status", r.getSendStatus().name(), "msgId", r.getMsgId(),
            "offsetMsgId", r.getOffsetMsgId(), "topic", r.getMessageQueue().getTopic(),
            "queueId", r.getMessageQueue().getQueueId(), "queueOffset", r.getQueueOffset());
    }
}
