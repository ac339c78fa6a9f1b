import com.alibaba.fastjson.JSONObject;
import java.util.HashMap;
import java.util.Map;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.RPCHook;

/** Machine-readable output of the test programs: one line "@@ " + JSON object per event, flushed at once. */
public final class Out {
    private Out() {}

    public static synchronized void emit(String event, Object... keyValues) {
        JSONObject o = new JSONObject(true);
        o.put("event", event);
        for (int i = 0; i + 1 < keyValues.length; i += 2) {
            o.put(String.valueOf(keyValues[i]), keyValues[i + 1]);
        }
        System.out.println("@@ " + o.toJSONString());
        System.out.flush();
    }

    /** An exception with its causes, for the test's failure message. */
    public static String describe(Throwable e) {
        StringBuilder b = new StringBuilder(e.toString());
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            b.append(" <- caused by ").append(c);
        }
        return b.toString();
    }

    /** Arguments "key=value"; a missing key takes the given default. */
    public static Map<String, String> args(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (String a : argv) {
            int eq = a.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("argument is not key=value: " + a);
            }
            m.put(a.substring(0, eq), a.substring(eq + 1));
        }
        return m;
    }

    public static String get(Map<String, String> m, String key, String dflt) {
        String v = m.get(key);
        return v == null ? dflt : v;
    }

    /** The signing hook of account ak= sk= (RocketMQ's AclClientRPCHook); null without ak=. */
    public static RPCHook hook(Map<String, String> m) {
        String ak = m.get("ak");
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, need(m, "sk")));
    }

    public static String need(Map<String, String> m, String key) {
        String v = m.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing argument " + key + "=...");
        }
        return v;
    }
}
