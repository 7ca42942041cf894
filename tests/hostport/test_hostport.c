/* Unit tests of hostport/: one address with and without a port, IPv6 in brackets, the
 * port's range, lists with empty, repeated and too many items, and whitespace. */
#include <string.h>

#include "check.h"
#include "hostport.h"

/* hostport_parse of the whole NUL-terminated s. */
static int parse(const char *s, int default_port, hostport *hp) {
    return hostport_parse(s, strlen(s), default_port, hp);
}

static void test_one_address(void) {
    hostport hp;
    CHECK_INT_EQ(0, parse("127.0.0.1:6379", 0, &hp));
    CHECK_STR_EQ("127.0.0.1", hp.host);
    CHECK_INT_EQ(6379, hp.port);
    CHECK_INT_EQ(0, parse("zk-1.internal_a:1", 0, &hp));
    CHECK_STR_EQ("zk-1.internal_a", hp.host);
    CHECK_INT_EQ(1, hp.port);
    CHECK_INT_EQ(0, parse("h:65535", 0, &hp));
    CHECK_INT_EQ(65535, hp.port);
    /* Only the len bytes given are read. */
    CHECK_INT_EQ(0, hostport_parse("a:12,b:3", 4, 0, &hp));
    CHECK_STR_EQ("a", hp.host);
    CHECK_INT_EQ(12, hp.port);
    puts("ok: HOST:PORT");
}

static void test_default_port(void) {
    hostport hp;
    CHECK_INT_EQ(0, parse("db.internal", 3306, &hp));
    CHECK_STR_EQ("db.internal", hp.host);
    CHECK_INT_EQ(3306, hp.port);
    CHECK_INT_EQ(0, parse("db:3310", 3306, &hp));
    CHECK_INT_EQ(3310, hp.port);
    CHECK_INT_EQ(-1, parse("db", 0, &hp)); /* no default: the port is required */
    CHECK_INT_EQ(-1, parse("db:", 3306, &hp));
    puts("ok: a missing port is the caller's default, or an error without one");
}

static void test_ipv6(void) {
    hostport hp;
    char buf[64];
    CHECK_INT_EQ(0, parse("[::1]:2379", 0, &hp));
    CHECK_STR_EQ("::1", hp.host);
    CHECK_INT_EQ(2379, hp.port);
    CHECK_INT_EQ(0, hostport_format(&hp, buf, sizeof(buf)));
    CHECK_STR_EQ("[::1]:2379", buf);
    CHECK_INT_EQ(0, parse("[fe80::1]", 3306, &hp));
    CHECK_STR_EQ("fe80::1", hp.host);
    CHECK_INT_EQ(0, parse("[::ffff:10.0.0.1]:1", 0, &hp));
    CHECK_STR_EQ("::ffff:10.0.0.1", hp.host);
    static const char *bad[] = {"[::1]",   "[::1",    "::1:80",   "[]:1",   "[:]:1",
                                "[abc]:1", "[::g]:1", "[::1]x:1", "[::1]:", "[::1]:0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse(bad[i], 0, &hp) != -1) CHECK_FAIL_("hostport_parse(\"%s\") accepted", bad[i]);
    puts("ok: IPv6 in brackets, kept without them and written back with them");
}

static void test_refused(void) {
    hostport hp = {.host = "untouched", .port = 7};
    char long_host[300];
    memset(long_host, 'h', 256);
    memcpy(long_host + 256, ":1", 3);
    static const char *bad[] = {"",         ":6379", "host:", "host:0",  "host:65536", "host:6x",
                                "h:123456", "h:-1",  "h:+1",  "ho st:1", " h:1",       "h:1 ",
                                "h :1",     "h: 1",  "h\t:1", "h:1:2",   "a/b:1",      "h@x:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parse(bad[i], 0, &hp) != -1) CHECK_FAIL_("hostport_parse(\"%s\") accepted", bad[i]);
    CHECK_INT_EQ(-1, parse(long_host, 0, &hp));
    long_host[255] = '\0';
    memcpy(long_host + 255, ":1", 3);
    CHECK_INT_EQ(0, parse(long_host, 0, &hp)); /* 255 bytes of host: the longest */
    CHECK_INT_EQ(-1, hostport_parse(NULL, 0, 0, &hp));
    hostport keep = {.host = "untouched", .port = 7};
    CHECK_INT_EQ(-1, parse("h:0", 0, &keep));
    CHECK_STR_EQ("untouched", keep.host);
    CHECK_INT_EQ(7, keep.port);
    puts("ok: no port, port out of 1..65535, whitespace and odd characters are refused");
}

static void test_lists(void) {
    hostport hp[4];
    CHECK_INT_EQ(1, hostport_list_parse("a:1", hp, 4));
    CHECK_INT_EQ(3, hostport_list_parse("a:1,[::1]:2,c.d:3", hp, 4));
    CHECK_STR_EQ("::1", hp[1].host);
    CHECK_INT_EQ(3, hp[2].port);
    CHECK_INT_EQ(2, hostport_list_parse("a:1,a:2", NULL, 4)); /* same host, other port */
    CHECK_INT_EQ(4, hostport_list_parse("a:1,b:1,c:1,d:1", hp, 4));
    static const char *bad[] = {
        "",        ",",        "a:1,",     ",a:1",      "a:1,,b:2",
        "a:1,a:1", "a:1, b:2", "a:1 ,b:2", "a:1,b:2,c", "a:1,b:2,c:3,d:4,e:5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (hostport_list_parse(bad[i], hp, 4) != -1)
            CHECK_FAIL_("hostport_list_parse(\"%s\") accepted", bad[i]);
    CHECK_INT_EQ(-1, hostport_list_parse(NULL, hp, 4));
    CHECK_INT_EQ(-1, hostport_list_parse("a:1", hp, 0));
    puts("ok: lists: no empty item, no repeat, at most max");
}

int main(void) {
    test_one_address();
    test_default_port();
    test_ipv6();
    test_refused();
    test_lists();
    return 0;
}
