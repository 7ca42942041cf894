/*
 * Starts Debian's JMeter 2.13 in non-GUI mode so that it can load a test plan.
 *
 * Debian builds JMeter 2.13 against its own, newer XStream (1.4.20), whose security
 * framework forbids every type it was not told about. JMeter 2.13 predates that
 * framework and tells it nothing, so `jmeter -n -t plan.jmx` dies on any plan with
 * ForbiddenClassException: org.apache.jmeter.save.ScriptWrapper. This launcher loads
 * JMeter's properties (SaveService reads its own while initialising), allows JMeter's
 * own types (org.apache.jmeter.**, org.apache.jorphan.**) in SaveService's two XStream
 * instances, and hands the command line to JMeter as its own driver would.
 *
 * Run it from source, with Debian's jars on the class path (loadtest/oversell --tool jmeter,
 * which loadtest/jmeter/run calls, does):
 *   java -cp '/usr/share/jmeter/bin/ApacheJMeter.jar:/usr/share/jmeter/lib/*:/usr/share/jmeter/lib/ext/*' \
 *     loadtest/jmeter/Launcher.java -n -t plan.jmx [JMeter's options]
 * JMETER_HOME names another JMeter 2.13 tree (default /usr/share/jmeter).
 */

import com.thoughtworks.xstream.XStream;
import java.lang.reflect.Field;
import org.apache.jmeter.JMeter;
import org.apache.jmeter.save.SaveService;
import org.apache.jmeter.util.JMeterUtils;
import org.apache.jorphan.logging.LoggingManager;

public class Launcher {
    /* The types a test plan and a result file are made of. */
    private static final String[] JMETER_TYPES = {"org.apache.jmeter.**", "org.apache.jorphan.**"};

    public static void main(String[] args) throws Exception {
        String home = System.getenv().getOrDefault("JMETER_HOME", "/usr/share/jmeter");
        /* What JMeter's own driver (NewDriver) sets before it starts JMeter. */
        System.setProperty("jmeter.home", home);
        JMeterUtils.setJMeterHome(home);
        JMeterUtils.loadJMeterProperties(home + "/bin/jmeter.properties");
        /* SaveService logs while it initialises, before JMeter opens its log: send that
         * to the log the command line names (-j FILE), not to standard output. */
        for (int i = 0; i + 1 < args.length; i++)
            if (args[i].equals("-j"))
                JMeterUtils.setProperty(LoggingManager.LOG_FILE, args[i + 1]);
        LoggingManager.initializeLogging(JMeterUtils.getJMeterProperties());
        for (String name : new String[] {"JMXSAVER", "JTLSAVER"}) {
            Field f = SaveService.class.getDeclaredField(name);
            f.setAccessible(true);
            ((XStream) f.get(null)).allowTypesByWildcard(JMETER_TYPES);
        }
        new JMeter().start(args);
    }
}
