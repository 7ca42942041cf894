/* route.c: owner routing's state in this process (docs/routing.md): the view (the
 * members, from ZooKeeper by peers.c or from --peers), this instance's own address, the
 * circuit breaker of each peer, the test pins of --route-pin, and the counters. It
 * answers "who owns product N" (owner.c's rendezvous over the members whose circuit is
 * not open) and renders /route/view, /route/owner and the routing metrics. Memory only,
 * under one mutex held for a few string compares: any thread, the polling thread too. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostport.h"
#include "stockd.h"

/* A peer's circuit opens after this many failures in a row, and stays open this long
 * before one forward may try it again (half-open: that one's outcome closes or reopens
 * it). A forward that fails costs its frame a local serve, so the count is small. */
#define BREAKER_FAILURES 3
#define BREAKER_OPEN_NS  (1000u * 1000000u)
#define PINS_MAX         16

typedef struct breaker {
    char addr[STOCKD_ADDR_MAX];
    unsigned failures;   /* in a row */
    uint64_t open_until; /* 0 = closed */
} breaker;

static struct {
    pthread_mutex_t mu;
    bool on;
    bool zk; /* the members come from ZooKeeper (peers.c) */
    char self[STOCKD_ADDR_MAX];
    char members[STOCKD_PEERS_MAX][STOCKD_ADDR_MAX];
    size_t nmembers;
    uint64_t view;
    breaker br[STOCKD_PEERS_MAX];
    size_t nbr;
    int32_t pin_id[PINS_MAX];
    char pin_addr[PINS_MAX][STOCKD_ADDR_MAX];
    size_t npins;
    atomic_ullong count[STOCKD_RC_COUNT];
} R = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Copies one HOST:PORT of a list in its canonical form. */
static int canon(const hostport *hp, char *out) {
    return hostport_format(hp, out, STOCKD_ADDR_MAX);
}

static int parse_pins(const char *s, char *err, size_t errlen) {
    char buf[sizeof(((stockd_config *)0)->route_pin)], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        const char *why = NULL;
        hostport hp;
        if (R.npins == PINS_MAX || !eq ||
            stockd_parse_id(tok, (size_t)(eq - tok), &R.pin_id[R.npins], &why) != 0 ||
            hostport_list_parse(eq + 1, &hp, 1) != 1 || canon(&hp, R.pin_addr[R.npins]) != 0) {
            snprintf(err, errlen, "--route-pin must be ID=HOST:PORT[,ID=HOST:PORT...] (at most %d)",
                     PINS_MAX);
            return -1;
        }
        R.npins++;
    }
    return 0;
}

int stockd_route_setup(const stockd_config *cfg, bool zk, char *err, size_t errlen) {
    hostport hp[STOCKD_PEERS_MAX];
    char self[STOCKD_ADDR_MAX];
    int n;

    if (cfg->announce[0]) {
        if (hostport_list_parse(cfg->announce, hp, 1) != 1 || canon(&hp[0], self) != 0) {
            snprintf(err, errlen, "--announce must be HOST:PORT, got '%s'", cfg->announce);
            return -1;
        }
    } else {
        snprintf(self, sizeof(self), "%s:%u", cfg->bind, cfg->port);
    }
    pthread_mutex_lock(&R.mu);
    R.on = cfg->route == STOCKD_ROUTE_OWNER;
    R.zk = zk;
    memcpy(R.self, self, sizeof(self));
    R.nmembers = 0;
    R.view = 0;
    if (!zk) {
        /* The static view: the list, this instance included whether or not it is named. */
        n = cfg->peers[0] ? hostport_list_parse(cfg->peers, hp, STOCKD_PEERS_MAX - 1) : 0;
        for (int i = 0; i < n; i++)
            if (canon(&hp[i], R.members[R.nmembers]) == 0 &&
                strcmp(R.members[R.nmembers], self) != 0)
                R.nmembers++;
        memcpy(R.members[R.nmembers++], self, sizeof(self));
        R.view = 1;
    }
    int rc = parse_pins(cfg->route_pin, err, errlen);
    pthread_mutex_unlock(&R.mu);
    return rc;
}

void stockd_route_set_members(const char *const *addrs, size_t n, uint64_t view) {
    pthread_mutex_lock(&R.mu);
    R.nmembers = 0;
    for (size_t i = 0; i < n && R.nmembers < STOCKD_PEERS_MAX; i++)
        snprintf(R.members[R.nmembers++], STOCKD_ADDR_MAX, "%s", addrs[i]);
    R.view = view;
    pthread_mutex_unlock(&R.mu);
}

uint64_t stockd_route_view(void) {
    pthread_mutex_lock(&R.mu);
    uint64_t v = R.view;
    pthread_mutex_unlock(&R.mu);
    return v;
}

bool stockd_route_on(void) {
    return R.on;
}

const char *stockd_route_self(void) {
    return R.self; /* set once, before any other thread starts */
}

/* The breaker of addr, made closed on first use; NULL when the table is full. Under mu. */
static breaker *breaker_of(const char *addr) {
    for (size_t i = 0; i < R.nbr; i++)
        if (strcmp(R.br[i].addr, addr) == 0) return &R.br[i];
    if (R.nbr == STOCKD_PEERS_MAX) return NULL;
    breaker *b = &R.br[R.nbr++];
    snprintf(b->addr, sizeof(b->addr), "%s", addr);
    return b;
}

/* Is addr's circuit open at now? Under mu. */
static bool is_open(const char *addr, uint64_t now) {
    for (size_t i = 0; i < R.nbr; i++)
        if (strcmp(R.br[i].addr, addr) == 0) return R.br[i].open_until > now;
    return false;
}

stockd_owner stockd_route_owner(int32_t product_id, char *addr, size_t cap) {
    const char *usable[STOCKD_PEERS_MAX];
    size_t n = 0;
    uint64_t now = stockd_now_ns();
    stockd_owner who = STOCKD_OWNER_SELF;

    pthread_mutex_lock(&R.mu);
    const char *pick = NULL;
    for (size_t i = 0; i < R.npins && !pick; i++)
        if (R.pin_id[i] == product_id) pick = R.pin_addr[i];
    if (!pick) {
        /* A peer whose circuit is open owns nothing here until it answers again, so
         * its products spread over the others rather than all falling back at once. */
        for (size_t i = 0; i < R.nmembers; i++)
            if (strcmp(R.members[i], R.self) == 0 || !is_open(R.members[i], now))
                usable[n++] = R.members[i];
        int k = stockd_owner_pick(usable, n, product_id);
        pick = k >= 0 ? usable[k] : R.self;
    }
    if (strcmp(pick, R.self) != 0) {
        who = STOCKD_OWNER_PEER;
        snprintf(addr, cap, "%s", pick);
    }
    pthread_mutex_unlock(&R.mu);
    return who;
}

bool stockd_route_breaker_allow(const char *addr) {
    uint64_t now = stockd_now_ns();
    bool allow = true;
    pthread_mutex_lock(&R.mu);
    breaker *b = breaker_of(addr);
    if (b && b->open_until) {
        allow = b->open_until <= now;
        /* Half-open: this forward is the one try; the others wait for its outcome. */
        if (allow) b->open_until = now + BREAKER_OPEN_NS;
    }
    pthread_mutex_unlock(&R.mu);
    return allow;
}

void stockd_route_breaker_note(const char *addr, bool ok) {
    pthread_mutex_lock(&R.mu);
    breaker *b = breaker_of(addr);
    if (b && ok) {
        b->failures = 0;
        b->open_until = 0;
    } else if (b && (++b->failures >= BREAKER_FAILURES || b->open_until)) {
        b->open_until = stockd_now_ns() + BREAKER_OPEN_NS;
    }
    pthread_mutex_unlock(&R.mu);
}

void stockd_route_count(stockd_route_counter c, uint64_t n) {
    if ((unsigned)c < STOCKD_RC_COUNT)
        atomic_fetch_add_explicit(&R.count[c], n, memory_order_relaxed);
}

void stockd_route_stats(stockd_route_stats_t *out) {
    uint64_t now = stockd_now_ns();
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < STOCKD_RC_COUNT; i++)
        out->count[i] = atomic_load_explicit(&R.count[i], memory_order_relaxed);
    pthread_mutex_lock(&R.mu);
    out->on = R.on;
    out->view = R.view;
    out->members = R.nmembers;
    for (size_t i = 0; i < R.nbr; i++) {
        snprintf(out->peer[i], STOCKD_ADDR_MAX, "%s", R.br[i].addr);
        out->open[i] = R.br[i].open_until > now;
    }
    out->npeers = R.nbr;
    pthread_mutex_unlock(&R.mu);
}

char *stockd_route_view_json(void) {
    cJSON *o = cJSON_CreateObject(), *m;
    char *out = NULL;
    uint64_t now = stockd_now_ns();
    if (!o) return NULL;
    pthread_mutex_lock(&R.mu);
    cJSON_AddStringToObject(o, "route", R.on ? "owner" : "local");
    cJSON_AddNumberToObject(o, "view", (double)R.view);
    cJSON_AddStringToObject(o, "source", R.zk ? "zookeeper" : "static");
    cJSON_AddStringToObject(o, "self", R.self);
    if ((m = cJSON_AddArrayToObject(o, "members")) != NULL)
        for (size_t i = 0; i < R.nmembers; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "address", R.members[i]);
            cJSON_AddBoolToObject(e, "breaker_open", is_open(R.members[i], now));
            cJSON_AddItemToArray(m, e);
        }
    pthread_mutex_unlock(&R.mu);
    out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

char *stockd_route_owner_json(int32_t product_id) {
    char addr[STOCKD_ADDR_MAX];
    cJSON *o = cJSON_CreateObject();
    char *out = NULL;
    if (!o) return NULL;
    bool self = stockd_route_owner(product_id, addr, sizeof(addr)) == STOCKD_OWNER_SELF;
    cJSON_AddNumberToObject(o, "id", product_id);
    cJSON_AddStringToObject(o, "owner", self ? R.self : addr);
    cJSON_AddBoolToObject(o, "self", self);
    cJSON_AddNumberToObject(o, "view", (double)stockd_route_view());
    out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}
