/* stockdb_url_test: stockdb_config_from_url accepts the URLs the service is given and
 * refuses, without touching the config, every malformed or over-long one. Pure logic:
 * no server is needed. */
#include "check.h"
#include "stockdb.h"

/* A config with recognisable values, to see which fields a parse changed. */
static stockdb_config sentinel(void) {
    stockdb_config c;
    memset(&c, 0, sizeof(c));
    strcpy(c.host, "old-host");
    c.port = 1;
    strcpy(c.user, "old-user");
    strcpy(c.password, "from-env");
    strcpy(c.database, "old-db");
    c.connect_timeout_s = 7;
    c.rw_timeout_s = 9;
    return c;
}

static void test_full_url_sets_every_field(void) {
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK,
                 stockdb_config_from_url(&c, "mysql://stockd:s3cret@127.0.0.1:3307/shop"));
    CHECK_STR_EQ("127.0.0.1", c.host);
    CHECK_INT_EQ(3307, c.port);
    CHECK_STR_EQ("stockd", c.user);
    CHECK_STR_EQ("s3cret", c.password);
    CHECK_STR_EQ("shop", c.database);
    CHECK_INT_EQ(7, c.connect_timeout_s); /* timeouts are not part of the URL */
    CHECK_INT_EQ(9, c.rw_timeout_s);
}

static void test_no_password_keeps_the_old_one(void) {
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://stockd@db.example-1.local/t_x"));
    CHECK_STR_EQ("from-env", c.password);
    CHECK_STR_EQ("db.example-1.local", c.host);
    CHECK_INT_EQ(3306, c.port); /* the default */
    CHECK_STR_EQ("t_x", c.database);
}

static void test_empty_password_is_set_empty(void) {
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://root:@localhost/db"));
    CHECK_STR_EQ("", c.password);
    CHECK_STR_EQ("root", c.user);
}

static void test_percent_escapes_are_decoded(void) {
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://a%3Ab:p%40ss%2F%25w:rd@h/d"));
    CHECK_STR_EQ("a:b", c.user);
    CHECK_STR_EQ("p@ss/%w:rd", c.password); /* a raw ':' in the password is fine */
}

static void test_ipv6_in_brackets(void) {
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://u@[::1]:3310/d"));
    CHECK_STR_EQ("::1", c.host);
    CHECK_INT_EQ(3310, c.port);
    c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://u@[fe80::1]/d"));
    CHECK_STR_EQ("fe80::1", c.host);
    CHECK_INT_EQ(3306, c.port);
}

static void test_port_bounds(void) {
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://u@h:1/d"));
    CHECK_INT_EQ(1, c.port);
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, "mysql://u@h:65535/d"));
    CHECK_INT_EQ(65535, c.port);
}

/* Fields exactly as long as their buffer allows are accepted. */
static void test_longest_fields_fit(void) {
    char url[1024], user[64], pass[128], host[256], db[64];
    memset(user, 'u', 63), user[63] = '\0';
    memset(pass, 'p', 127), pass[127] = '\0';
    memset(host, 'h', 255), host[255] = '\0';
    memset(db, 'd', 63), db[63] = '\0';
    snprintf(url, sizeof(url), "mysql://%s:%s@%s:1/%s", user, pass, host, db);
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_OK, stockdb_config_from_url(&c, url));
    CHECK_STR_EQ(user, c.user);
    CHECK_STR_EQ(pass, c.password);
    CHECK_STR_EQ(host, c.host);
    CHECK_STR_EQ(db, c.database);
}

static void test_bad_urls_are_refused_and_change_nothing(void) {
    char long_user[128], long_pass[256], long_host[512], long_db[128], esc_user[256];
    memset(long_user, 'u', 64), long_user[64] = '\0';
    memset(long_pass, 'p', 128), long_pass[128] = '\0';
    memset(long_host, 'h', 256), long_host[256] = '\0';
    memset(long_db, 'd', 64), long_db[64] = '\0';
    /* 64 decoded bytes written as escapes: the limit counts decoded bytes. */
    for (int i = 0; i < 64; i++)
        memcpy(esc_user + 3 * i, "%41", 3);
    esc_user[192] = '\0';
    char u1[600], u2[600], u3[600], u4[600], u5[600];
    snprintf(u1, sizeof(u1), "mysql://%s@h/d", long_user);
    snprintf(u2, sizeof(u2), "mysql://u:%s@h/d", long_pass);
    snprintf(u3, sizeof(u3), "mysql://u@%s/d", long_host);
    snprintf(u4, sizeof(u4), "mysql://u@h/%s", long_db);
    snprintf(u5, sizeof(u5), "mysql://%s@h/d", esc_user);
    const char *bad[] = {
        "",
        "mysql:/u@h/d",
        "mysqlx://u@h/d",
        "postgres://u@h/d",
        "u@h/d",
        "mysql://u@h",         /* no database */
        "mysql://u@h/",        /* empty database */
        "mysql://h/d",         /* no user */
        "mysql://@h/d",        /* empty user */
        "mysql://:p@h/d",      /* empty user, password only */
        "mysql://u@/d",        /* empty host */
        "mysql://u@:3306/d",   /* empty host */
        "mysql://u@h:/d",      /* empty port */
        "mysql://u@h:0/d",     /* port 0 */
        "mysql://u@h:65536/d", /* port too big */
        "mysql://u@h:99999/d",
        "mysql://u@h:123456/d", /* too many digits */
        "mysql://u@h:-1/d",
        "mysql://u@h:+1/d",
        "mysql://u@h:33a/d",
        "mysql://u@h: 33/d",
        "mysql://u@h:3306:1/d", /* two ports */
        "mysql://u@h/d/e",      /* a path, not a database */
        "mysql://u@h/d?ssl=1",  /* no query strings */
        "mysql://u@h/d#x",
        "mysql://u@h/d b",
        "mysql://u@h/d;drop",
        "mysql://u@h/d%41",   /* no escapes in the database name */
        "mysql://u@h@i/d",    /* two '@' */
        "mysql://u:p@ss@h/d", /* a raw '@' in the password */
        "mysql://u:p/ss@h/d", /* a raw '/' in the password ends the authority */
        "mysql://u@h_o st/d",
        "mysql://u@h/o/d",
        "mysql://u%@h/d", /* truncated escape */
        "mysql://u%4@h/d",
        "mysql://u%zz@h/d",  /* not hex */
        "mysql://u%00x@h/d", /* NUL byte */
        "mysql://u:p%0@h/d",
        "mysql://u v@h/d",  /* space */
        "mysql://u\t@h/d",  /* control */
        "mysql://u@[::1/d", /* unclosed bracket */
        "mysql://u@[]/d",
        "mysql://u@[127.0.0.1]/d", /* brackets hold IPv6 only */
        "mysql://u@[::1]x/d",
        "mysql://u@[::1]:/d",
        "mysql://u@h:3306",
        u1,
        u2,
        u3,
        u4,
        u5,
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        stockdb_config c = sentinel(), before = sentinel();
        int rc = stockdb_config_from_url(&c, bad[i]);
        if (rc != STOCKDB_ERR_CONFIG)
            CHECK_FAIL_("url \"%s\": expected %d (STOCKDB_ERR_CONFIG), got %d", bad[i],
                        STOCKDB_ERR_CONFIG, rc);
        if (memcmp(&c, &before, sizeof(c)) != 0)
            CHECK_FAIL_("url \"%s\": the config changed although the URL was refused", bad[i]);
    }
    stockdb_config c = sentinel();
    CHECK_INT_EQ(STOCKDB_ERR_CONFIG, stockdb_config_from_url(&c, NULL));
    CHECK_INT_EQ(STOCKDB_ERR_CONFIG, stockdb_config_from_url(NULL, "mysql://u@h/d"));
}

static void test_strerror_names_every_code(void) {
    for (int code = STOCKDB_ERR_DEADLOCK; code <= STOCKDB_OK; code++) {
        const char *s = stockdb_strerror(code);
        CHECK(s != NULL);
        if (strcmp(s, "unknown error code") == 0)
            CHECK_FAIL_("code %d: expected a name, got \"%s\"", code, s);
    }
    CHECK_STR_EQ("unknown error code", stockdb_strerror(-100));
}

int main(void) {
    test_full_url_sets_every_field();
    test_no_password_keeps_the_old_one();
    test_empty_password_is_set_empty();
    test_percent_escapes_are_decoded();
    test_ipv6_in_brackets();
    test_port_bounds();
    test_longest_fields_fit();
    test_bad_urls_are_refused_and_change_nothing();
    test_strerror_names_every_code();
    printf("stockdb_url_test: ok\n");
    return 0;
}
