/* ZkCversionSnapshot.java: writes a ZooKeeper data directory whose one snapshot holds the
 * persistent node PATH (and its ancestors) with its child version (cversion) at CVERSION.
 * ZooKeeper names a sequential child by its parent's cversion as the server stores it (a
 * count of the children created; a client reads twice it less the children), so this is
 * a lock parent whose next child is numbered CVERSION: how a test reaches ZooKeeper's sequence limit
 * (2^31-1), which no client call sets and 2^31 creates would take days to reach. It uses
 * ZooKeeper's own classes, as the server writes and reads a snapshot: a DataTree built
 * with createNode, whose parentCVersion argument (the one a transaction replayed from
 * the log carries) sets the parent's cversion, then FileTxnSnapLog.save. Run it before
 * the server starts on DATADIR (its dataDir).
 *
 *     java -cp "/usr/share/java/*" ZkCversionSnapshot.java DATADIR PATH CVERSION
 *
 * Prints the cversion written. */
import java.io.File;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public class ZkCversionSnapshot {
    public static void main(String[] args) throws Exception {
        if (args.length != 3 || !args[1].startsWith("/")) {
            System.err.println("usage: ZkCversionSnapshot DATADIR /PATH CVERSION");
            System.exit(2);
        }
        File dir = new File(args[0]);
        String path = args[1];
        int cversion = Integer.parseInt(args[2]);
        DataTree tree = new DataTree();
        long zxid = 1;
        StringBuilder at = new StringBuilder();
        for (String part : path.substring(1).split("/")) {
            at.append('/').append(part);
            tree.createNode(at.toString(), new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, zxid++, 0);
        }
        /* A child made with the parent's cversion given, then deleted: the cversion stays. */
        String seed = path + "/seed";
        tree.createNode(seed, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, cversion, zxid++, 0);
        tree.deleteNode(seed, zxid);
        tree.lastProcessedZxid = zxid;
        FileTxnSnapLog snaps = new FileTxnSnapLog(dir, dir);
        snaps.save(tree, new ConcurrentHashMap<>(), true);
        snaps.close();
        System.out.println(tree.getNode(path).stat.getCversion());
    }
}
