// CuratorHold: takes a product's lock with Curator's InterProcessMutex, the Java side of a
// fleet that shares stockd's ZooKeeper lock, and holds it until told to let go.
//
//   java -cp <Debian's jars> CuratorHold.java ZK_HOSTS LOCK_PATH DIR
//
// Once connected it writes DIR/ready and waits for DIR/go; once it holds, it writes DIR/held, waits for DIR/release to exist, releases, and writes
// DIR/released.
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorHold {
    public static void main(String[] args) throws Exception {
        String hosts = args[0], lockPath = args[1];
        Path dir = Path.of(args[2]);
        try (CuratorFramework zk =
                     CuratorFrameworkFactory.newClient(hosts, new ExponentialBackoffRetry(100, 5))) {
            zk.start();
            zk.blockUntilConnected();
            Files.writeString(dir.resolve("ready"), "ok\n");
            while (!Files.exists(dir.resolve("go"))) Thread.sleep(20);
            InterProcessMutex lock = new InterProcessMutex(zk, lockPath);
            lock.acquire();
            Files.writeString(dir.resolve("held"), "ok\n");
            while (!Files.exists(dir.resolve("release"))) Thread.sleep(20);
            lock.release();
            Files.writeString(dir.resolve("released"), "ok\n");
        }
    }
}
