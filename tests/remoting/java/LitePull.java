import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A DefaultLitePullConsumer in subscribe mode (auto commit): polls until expect=N messages arrived
 * (or timeout= seconds: event "timeout"), prints one "consumed" event each, commits and shuts down.
 * Args: namesrv= group= topic= [sub=*] [expect=10] [timeout=120] [from=first|last]
 */
public final class LitePull {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Out.args(argv);
        int expect = Integer.parseInt(Out.get(a, "expect", "10"));
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(Out.get(a, "timeout", "120"));
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(Out.need(a, "group"));
        consumer.setNamesrvAddr(Out.need(a, "namesrv"));
        consumer.setConsumeFromWhere("last".equals(Out.get(a, "from", "first"))
            ? ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET : ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(Out.need(a, "topic"), Out.get(a, "sub", "*"));
        consumer.start();
        int got = 0;
        while (got < expect && System.currentTimeMillis() < deadline) {
            List<MessageExt> msgs = consumer.poll(1000);
            for (MessageExt m : msgs) {
                Out.emit("consumed", "topic", m.getTopic(), "body", new String(m.getBody(), StandardCharsets.UTF_8),
                    "msgId", m.getMsgId(), "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(),
                    "tags", m.getTags());
                got++;
            }
        }
        Out.emit(got >= expect ? "done" : "timeout", "count", got);
        consumer.commitSync();
        consumer.shutdown();
        Out.emit("stopped");
    }
}
