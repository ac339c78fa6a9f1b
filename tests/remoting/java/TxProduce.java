import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Sends count transactional messages; message i's local transaction commits (i % 3 == 0), rolls back
 * (i % 3 == 1) or stays unknown (i % 3 == 2). The broker's check of an unknown one is answered COMMIT
 * and printed ("checked"). Waits until every unknown one was checked (at most wait= seconds).
 * Args: namesrv= topic= [count=6] [group=test_tx_producer] [wait=120] [ak= sk=]
 */
public final class TxProduce {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = Out.args(argv);
        String topic = Out.need(a, "topic");
        int count = Integer.parseInt(Out.get(a, "count", "6"));
        Set<String> checked = ConcurrentHashMap.newKeySet();
        TransactionMQProducer producer = new TransactionMQProducer(Out.get(a, "group", "test_tx_producer"), Out.hook(a));
        producer.setNamesrvAddr(Out.need(a, "namesrv"));
        producer.setSendMsgTimeout(10000);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                int i = (Integer) arg;
                return i % 3 == 0 ? LocalTransactionState.COMMIT_MESSAGE
                    : i % 3 == 1 ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                if (checked.add(body)) {
                    Out.emit("checked", "body", body, "topic", msg.getTopic(), "msgId", msg.getMsgId(),
                        "checkTimes", msg.getProperty("TRANSACTION_CHECK_TIMES"));
                }
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        try {
            int unknown = 0;
            for (int i = 0; i < count; i++) {
                Message m = new Message(topic, ("tx-" + i).getBytes(StandardCharsets.UTF_8));
                m.setKeys("txkey-" + i);
                TransactionSendResult r = producer.sendMessageInTransaction(m, i);
                Out.emit("sent", "i", i, "status", r.getSendStatus().name(), "msgId", r.getMsgId(),
                    "offsetMsgId", r.getOffsetMsgId(), "state", r.getLocalTransactionState().name());
                if (i % 3 == 2) {
                    unknown++;
                }
            }
            long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(Out.get(a, "wait", "120"));
            while (checked.size() < unknown && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            if (checked.size() < unknown) {
                Out.emit("error", "error", "only " + checked.size() + " of " + unknown + " unknown transactions checked");
            }
            Out.emit("done");
        } catch (Exception e) {
            Out.emit("error", "error", e.toString());
        } finally {
            producer.shutdown();
        }
    }
}
