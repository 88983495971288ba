// A judge for tests/consumer_units/test_java_judge.py: runs the Java client's own
// ConsumerProtocol and assignors on inputs given one command per line on stdin, and prints one
// answer line per command. Written for this project's tests; it uses only public classes of
// kafka-clients (plus the internals ConsumerProtocol class, which Java members use to read ours).
//
// Commands (hex = bytes in lowercase hex, "-" = null; partitions as topic:partition):
//   decsub <hex>                   -> topics=a,b owned=t:0,t:1 gen=<n|-> rack=<r|-> ud=<hex|->
//   decasg <hex>                   -> parts=t:0,t:1 ud=<hex|->
//   encsub <version> <topics> <owned> <gen> <rack> <ud>    -> <hex>
//   encasg <version> <parts> <ud>                          -> <hex>
//   assign <assignor> <topic:count,...> <member>=<subscription hex> ...
//                                  -> <member>=<parts> ... (members sorted)
//   jaas <hex of UTF-8 sasl.jaas.config>
//                                  -> module=<name> flag=<flag> <key>=<hex of value> ... (keys sorted)
//   default <config key>           -> the consumer config's default, as a string
//   config <key>=<hex of UTF-8 value> ...
//                                  -> OK, or the exception Java's ConsumerConfig raises
import java.nio.ByteBuffer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.config.ConfigDef;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.JaasContext;
import org.apache.kafka.common.config.types.Password;

public class ConsumerProtocolJudge {
    static String hex(ByteBuffer b) {
        if (b == null) return "-";
        ByteBuffer d = b.duplicate();
        StringBuilder sb = new StringBuilder();
        while (d.hasRemaining()) sb.append(String.format("%02x", d.get() & 0xff));
        return sb.length() == 0 ? "" : sb.toString();
    }

    static ByteBuffer unhex(String s) {
        if (s.equals("-")) return null;
        if (s.equals("_")) return ByteBuffer.allocate(0);
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return ByteBuffer.wrap(out);
    }

    static String parts(List<TopicPartition> tps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.topic() + ":" + tp.partition());
        return String.join(",", out);
    }

    static List<TopicPartition> parseParts(String s) {
        List<TopicPartition> out = new ArrayList<>();
        if (s.equals("_")) return out;
        for (String item : s.split(",")) {
            int i = item.lastIndexOf(':');
            out.add(new TopicPartition(item.substring(0, i), Integer.parseInt(item.substring(i + 1))));
        }
        return out;
    }

    static List<String> parseList(String s) {
        List<String> out = new ArrayList<>();
        if (s.equals("_")) return out;
        Collections.addAll(out, s.split(","));
        return out;
    }

    static ConsumerPartitionAssignor assignor(String name) {
        switch (name) {
            case "range": return new RangeAssignor();
            case "roundrobin": return new RoundRobinAssignor();
            case "sticky": return new StickyAssignor();
            case "cooperative-sticky": return new CooperativeStickyAssignor();
            default: throw new IllegalArgumentException(name);
        }
    }

    static String run(String[] w) {
        switch (w[0]) {
            case "decsub": {
                Subscription s = ConsumerProtocol.deserializeSubscription(unhex(w[1]));
                return "topics=" + String.join(",", s.topics())
                    + " owned=" + parts(s.ownedPartitions())
                    + " gen=" + s.generationId().map(String::valueOf).orElse("-")
                    + " rack=" + s.rackId().orElse("-")
                    + " ud=" + hex(s.userData());
            }
            case "decasg": {
                Assignment a = ConsumerProtocol.deserializeAssignment(unhex(w[1]));
                return "parts=" + parts(a.partitions()) + " ud=" + hex(a.userData());
            }
            case "encsub": {
                short version = Short.parseShort(w[1]);
                Subscription s = new Subscription(parseList(w[2]), unhex(w[6]), parseParts(w[3]),
                    Integer.parseInt(w[4]), w[5].equals("-") ? Optional.empty() : Optional.of(w[5]));
                return hex(ConsumerProtocol.serializeSubscription(s, version));
            }
            case "encasg": {
                short version = Short.parseShort(w[1]);
                Assignment a = new Assignment(parseParts(w[2]), unhex(w[3]));
                return hex(ConsumerProtocol.serializeAssignment(a, version));
            }
            case "assign": {
                List<PartitionInfo> infos = new ArrayList<>();
                Node node = new Node(0, "localhost", 9092);
                for (String item : w[2].split(",")) {
                    int i = item.lastIndexOf(':');
                    String topic = item.substring(0, i);
                    int count = Integer.parseInt(item.substring(i + 1));
                    for (int p = 0; p < count; p++)
                        infos.add(new PartitionInfo(topic, p, node, new Node[]{node}, new Node[]{node}));
                }
                Cluster cluster = new Cluster("c", List.of(node), infos, new HashSet<>(), new HashSet<>());
                Map<String, Subscription> subs = new TreeMap<>();
                for (int i = 3; i < w.length; i++) {
                    int eq = w[i].indexOf('=');
                    subs.put(w[i].substring(0, eq),
                        ConsumerProtocol.deserializeSubscription(unhex(w[i].substring(eq + 1))));
                }
                Map<String, Assignment> result =
                    assignor(w[1]).assign(cluster, new GroupSubscription(subs)).groupAssignment();
                List<String> out = new ArrayList<>();
                for (Map.Entry<String, Assignment> e : new TreeMap<>(result).entrySet()) {
                    List<TopicPartition> tps = new ArrayList<>(e.getValue().partitions());
                    tps.sort((x, y) -> x.topic().equals(y.topic())
                        ? Integer.compare(x.partition(), y.partition()) : x.topic().compareTo(y.topic()));
                    out.add(e.getKey() + "=" + parts(tps));
                }
                return String.join(" ", out);
            }
            case "jaas": {
                String text = new String(unhex(w[1]).array(), StandardCharsets.UTF_8);
                List<AppConfigurationEntry> entries;
                try {
                    entries = JaasContext.loadClientContext(Map.of("sasl.jaas.config", new Password(text)))
                        .configurationEntries();
                } catch (Exception e) {
                    return "REJECTED " + e.getClass().getSimpleName();
                }
                if (entries.size() != 1) return "REJECTED " + entries.size() + " modules";
                AppConfigurationEntry entry = entries.get(0);
                String flag = entry.getControlFlag().toString().replace("LoginModuleControlFlag: ", "");
                StringBuilder sb = new StringBuilder("module=" + entry.getLoginModuleName() + " flag=" + flag);
                for (Map.Entry<String, ?> option : new TreeMap<>(entry.getOptions()).entrySet()) {
                    byte[] value = String.valueOf(option.getValue()).getBytes(StandardCharsets.UTF_8);
                    sb.append(" ").append(option.getKey()).append("=").append(hex(ByteBuffer.wrap(value)));
                }
                return sb.toString();
            }
            case "default": {
                ConfigDef.ConfigKey key = ConsumerConfig.configDef().configKeys().get(w[1]);
                if (key == null) return "UNKNOWN";
                if (key.defaultValue == ConfigDef.NO_DEFAULT_VALUE) return "NO_DEFAULT";
                if (key.defaultValue == null) return "NULL";
                return "=" + ConfigDef.convertToString(key.defaultValue, key.type);
            }
            case "config": {
                Map<String, Object> props = new HashMap<>();
                props.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
                props.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
                for (int i = 1; i < w.length; i++) {
                    int eq = w[i].indexOf('=');
                    ByteBuffer value = unhex(w[i].substring(eq + 1));
                    props.put(w[i].substring(0, eq), new String(value.array(), StandardCharsets.UTF_8));
                }
                try {
                    new ConsumerConfig(props);
                    return "OK";
                } catch (Exception e) {
                    return "REJECTED " + e.getClass().getSimpleName() + ": " + e.getMessage();
                }
            }
            default:
                throw new IllegalArgumentException(w[0]);
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String answer;
            try {
                answer = run(line.trim().split(" "));
            } catch (Exception e) {
                answer = "ERROR " + e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            System.out.println(answer.replace('\n', ' '));
            System.out.flush();
        }
    }
}
