// ArticlesService: the source articles' stock service in Java, beside stockd on one lock.
// GET /stock/reduce?id=N takes the product's lock with Curator's InterProcessMutex, then
// runs the read-check-update transaction through MariaDB's JDBC driver: read the stock,
// pause (the business logic), and if a unit is left take it and write an order.
//
//   java -cp <Debian's jars> ArticlesService.java PORT ZK_HOSTS LOCK_TEMPLATE JDBC_URL
//        INSTANCE THINK_MS
//
// LOCK_TEMPLATE is stockd's --zk-lock-path ("{id}" for the product). The write carries
// the fencing token stockd's writes carry (docs/zookeeper-lock.md, "Sharing the lock with
// Curator and kazoo"): the czxid of the lock node it holds, fence_kind 1, and a
// compare-and-set on row_version, so a holder that lost its lock is refused as stockd's
// own would be. Answers are JSON: {"result":"deducted"|"sold_out"|"lock_lost"|...}.
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class ArticlesService {
    static CuratorFramework zk;
    static String template, jdbc, instance;
    static int thinkMs;
    static final ThreadLocal<Connection> DB = new ThreadLocal<>();

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        template = args[2];
        jdbc = args[3];
        instance = args[4];
        thinkMs = Integer.parseInt(args[5]);
        zk = CuratorFrameworkFactory.newClient(args[1], new ExponentialBackoffRetry(100, 5));
        zk.start();
        zk.blockUntilConnected();
        HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 256);
        http.createContext("/stock/reduce", ArticlesService::reduce);
        http.createContext("/health", ex -> answer(ex, 200, "{\"result\":\"ok\"}"));
        http.setExecutor(Executors.newFixedThreadPool(8));
        http.start();
        System.out.println("ready");
    }

    static void answer(HttpExchange ex, int status, String body) {
        try (ex) {
            byte[] b = body.getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(status, b.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(b);
            }
        } catch (Exception e) {
            // The client went away: nothing to tell it.
        }
    }

    static void reduce(HttpExchange ex) {
        String q = ex.getRequestURI().getQuery();
        if (q == null || !q.matches("id=[1-9][0-9]{0,8}")) {
            answer(ex, 400, "{\"result\":\"bad_request\"}");
            return;
        }
        int id = Integer.parseInt(q.substring(3));
        InterProcessMutex lock = new InterProcessMutex(zk, template.replace("{id}", "" + id));
        try {
            if (!lock.acquire(10, TimeUnit.SECONDS)) {
                answer(ex, 503, "{\"result\":\"lock_timeout\"}");
                return;
            }
        } catch (Exception e) {
            answer(ex, 503, "{\"result\":\"lock_unavailable\"}");
            return;
        }
        int status = 500;
        String body = "{\"result\":\"error\"}";
        try {
            // Our node is the first participant while we hold; its czxid is the token.
            String node = lock.getParticipantNodes().iterator().next();
            long token = zk.checkExists().forPath(node).getCzxid();
            String result = deduct(id, token);
            status = result.equals("deducted") || result.equals("sold_out") ? 200 : 503;
            body = "{\"result\":\"" + result + "\",\"instance\":\"" + instance + "\"}";
        } catch (Exception e) {
            DB.remove();
        } finally {
            try {
                lock.release();
            } catch (Exception e) {
                // The node goes with the session.
            }
        }
        answer(ex, status, body);
    }

    static String deduct(int id, long token) throws Exception {
        Connection c = DB.get();
        if (c == null || !c.isValid(1)) {
            c = DriverManager.getConnection(jdbc);
            c.setAutoCommit(false);
            DB.set(c);
        }
        try (PreparedStatement read = c.prepareStatement(
                     "SELECT stock, row_version FROM product WHERE id = ?")) {
            read.setInt(1, id);
            long version;
            try (ResultSet rs = read.executeQuery()) {
                if (!rs.next() || rs.getInt(1) <= 0) {
                    c.rollback();
                    return "sold_out";
                }
                version = rs.getLong(2);
            }
            Thread.sleep(thinkMs);
            try (PreparedStatement up = c.prepareStatement(
                         "UPDATE product SET stock = stock - 1, fence = ?, fence_kind = 1,"
                         + " row_version = row_version + 1 WHERE id = ? AND row_version = ?"
                         + " AND (fence <= ? OR fence_kind <> 1)");
                 PreparedStatement order = c.prepareStatement(
                         "INSERT INTO orders (product_id, instance, fence) VALUES (?, ?, ?)")) {
                up.setLong(1, token);
                up.setInt(2, id);
                up.setLong(3, version);
                up.setLong(4, token);
                if (up.executeUpdate() != 1) {
                    c.rollback();
                    return "lock_lost";
                }
                order.setInt(1, id);
                order.setString(2, instance);
                order.setLong(3, token);
                order.executeUpdate();
            }
            c.commit();
            return "deducted";
        } catch (Exception e) {
            c.rollback();
            throw e;
        }
    }
}
