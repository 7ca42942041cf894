/* Unit tests of owner routing's pure parts (docs/routing.md):
 *   - rendezvous hashing (owner.c): every instance computes the same owner from the same
 *     view, whatever the members' order; ownership spreads about evenly; when one member
 *     joins or leaves, only about 1/N of the products move, and only to or from it;
 *   - the frame (frame.c): a request whole survives the trip (method, path, every
 *     parameter, the forwarded headers, the request id and the deadline), and every
 *     malformed frame is refused with a reason before anything is served from it;
 *   - the owner's answers: well-formed ones parse, a short list or a bad entry does not;
 *   - the request ids a frame may carry: a client's key or stockd's own i/ id only;
 *   - the static view and the pins of --route-pin (route.c). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stockd.h"

#define PRODUCTS 20000

static void rendezvous(void) {
    const char *five[] = {"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080",
                          "10.0.0.5:8080"};
    const char *rev[] = {five[4], five[3], five[2], five[1], five[0]};
    unsigned owned[5] = {0}, moved_join = 0, moved_leave = 0;
    CHECK_INT_EQ(-1, stockd_owner_pick(five, 0, 1));
    for (int32_t p = 1; p <= PRODUCTS; p++) {
        int k5 = stockd_owner_pick(five, 5, p), k4 = stockd_owner_pick(five, 4, p);
        /* The order of the view does not matter: the same member wins. */
        CHECK(strcmp(five[k5], rev[stockd_owner_pick(rev, 5, p)]) == 0);
        owned[k5]++;
        /* Member 5 joins the four: a product moves only if it goes to member 5. */
        if (k5 != k4) {
            CHECK_INT_EQ(4, k5);
            moved_join++;
        }
        /* Member 3 leaves the five: only its products move. */
        const char *without3[] = {five[0], five[1], five[3], five[4]};
        const char *now = without3[stockd_owner_pick(without3, 4, p)];
        if (strcmp(now, five[k5]) != 0) {
            CHECK_INT_EQ(2, k5);
            moved_leave++;
        }
    }
    /* About 1/5 of the products each way (20% +- 2%), and an even spread. */
    printf("rendezvous: join moved %u, leave moved %u of %d\n", moved_join, moved_leave, PRODUCTS);
    CHECK_INT_GE(moved_join, PRODUCTS * 18 / 100);
    CHECK_INT_LE(moved_join, PRODUCTS * 22 / 100);
    CHECK_INT_EQ(owned[2], moved_leave);
    for (int i = 0; i < 5; i++) {
        CHECK_INT_GE(owned[i], PRODUCTS * 18 / 100);
        CHECK_INT_LE(owned[i], PRODUCTS * 22 / 100);
    }
}

static void frame_round_trip(void) {
    stockd_param params[] = {{"id", 2, "42", 2}, {"user", 4, "u-7", 3}, {"flag", 4, NULL, 0}};
    stockd_param headers[] = {{"Idempotency-Key", 15, "k-1", 3}, {"X-User", 6, "u-7", 3}};
    char *req = stockd_frame_request("POST", "/stock/reduce", params, 3, headers, 2);
    CHECK(req != NULL);
    stockd_frame_out out[2] = {{req, "k-1", 1500}, {req, "k-1", 0}};
    char *body = stockd_frame_build("127.0.0.1:1", 9, out, 2);
    CHECK(body != NULL);
    stockd_frame f;
    const char *why = stockd_frame_parse(body, strlen(body), &f);
    CHECK(why == NULL);
    CHECK_INT_EQ(2, f.n);
    stockd_frame_entry *e = &f.e[0];
    CHECK(strcmp(e->in.method, "POST") == 0 && strcmp(e->in.path, "/stock/reduce") == 0);
    CHECK_INT_EQ(3, e->in.nparams);
    CHECK(strcmp(e->in.params[1].key, "user") == 0 && strcmp(e->in.params[1].value, "u-7") == 0);
    CHECK(e->in.params[2].value == NULL);
    CHECK_INT_EQ(1, e->in.idem_keys);
    CHECK(e->in.idem_key_len == 3 && memcmp(e->in.idem_key, "k-1", 3) == 0);
    CHECK(strcmp(e->request_id, "k-1") == 0);
    CHECK_INT_EQ(1500, e->deadline_ms);
    CHECK_INT_EQ(0, f.e[1].deadline_ms);
    /* Rebuilt, it routes as the direct request would. */
    stockd_routed d;
    stockd_route_request(&e->in, &d);
    CHECK_INT_EQ(STOCKD_R_OK, d.error);
    CHECK_INT_EQ(STOCKD_ROUTE_REDUCE, d.route);
    CHECK_INT_EQ(42, d.product_id);
    CHECK(d.key_len == 3 && memcmp(d.key, "k-1", 3) == 0);
    stockd_frame_free(&f);
    free(body);
    free(req);
}

static void bad_frames(void) {
    static const char *bad[] = {
        "",
        "not json",
        "[]",
        "{}",
        "{\"entries\":{}}",
        "{\"entries\":[]}",
        "{\"entries\":[1]}",
        "{\"entries\":[{\"request\":\"x\",\"request_id\":\"k\"}]}",
        "{\"entries\":[{\"request\":{\"path\":\"/stock/reduce\"},\"request_id\":\"k\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/"
        "reduce\",\"params\":[]}}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/reduce\",\"params\":[],"
        "\"headers\":[]},\"request_id\":\"no spaces allowed\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/reduce\",\"params\":[],"
        "\"headers\":[]},\"request_id\":\"i/zz/1\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/"
        "reduce\",\"params\":[[\"id\","
        "1]],\"headers\":[]},\"request_id\":\"k\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/"
        "reduce\",\"params\":[[\"id\"]],"
        "\"headers\":[]},\"request_id\":\"k\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/"
        "reduce\",\"params\":\"id=1\","
        "\"headers\":[]},\"request_id\":\"k\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/reduce\",\"params\":[],"
        "\"headers\":[]},\"request_id\":\"k\",\"deadline_ms\":0}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/reduce\",\"params\":[],"
        "\"headers\":[]},\"request_id\":\"k\",\"deadline_ms\":\"5\"}]}",
        "{\"entries\":[{\"request\":{\"method\":\"GET\",\"path\":\"/stock/reduce\",\"params\":[],"
        "\"headers\":[]},\"request_id\":\"k\"},{\"request\":{}}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        stockd_frame f;
        const char *why = stockd_frame_parse(bad[i], strlen(bad[i]), &f);
        if (!why) CHECK_FAIL_("frame %zu was accepted: %s", i, bad[i]);
        stockd_frame_free(&f);
    }
    /* More entries than a batch may hold. */
    char *big = malloc(64 * (STOCKD_FRAME_MAX + 2));
    CHECK(big != NULL);
    size_t n = (size_t)sprintf(big, "{\"entries\":[");
    for (int i = 0; i <= STOCKD_FRAME_MAX; i++)
        n += (size_t)sprintf(big + n, "%s{\"request\":{},\"request_id\":\"k\"}", i ? "," : "");
    sprintf(big + n, "]}");
    stockd_frame f;
    CHECK(stockd_frame_parse(big, strlen(big), &f) != NULL);
    stockd_frame_free(&f);
    free(big);
}

static void answers(void) {
    stockd_frame_answer a[2] = {{200, STOCKD_R_DEDUCTED, "{\"result\":\"deducted\"}"},
                                {409, STOCKD_R_SOLD_OUT, "{\"result\":\"sold_out\"}"}};
    char *body = stockd_frame_answers(a, 2);
    CHECK(body != NULL);
    stockd_frame_answer back[2];
    void *h = stockd_frame_answers_parse(body, strlen(body), back, 2);
    CHECK(h != NULL);
    CHECK_INT_EQ(409, back[1].status);
    CHECK_INT_EQ(STOCKD_R_SOLD_OUT, back[1].result);
    CHECK(strcmp(back[0].body, a[0].body) == 0);
    stockd_frame_answers_free(h);
    /* One answer short, or an entry without its status: the forward failed. */
    CHECK(stockd_frame_answers_parse(body, strlen(body), back, 3) == NULL);
    const char *bad = "{\"answers\":[{\"result\":\"deducted\",\"body\":\"{}\"}]}";
    CHECK(stockd_frame_answers_parse(bad, strlen(bad), back, 1) == NULL);
    free(body);
}

static void request_ids(void) {
    CHECK_INT_EQ(0, stockd_check_request_id("order-7F3A"));
    CHECK_INT_EQ(0, stockd_check_request_id("i/0123456789abcdef/42"));
    CHECK_INT_EQ(-1, stockd_check_request_id("i/0123456789abcdef/"));
    CHECK_INT_EQ(-1, stockd_check_request_id("i/0123456789abcde/1"));
    CHECK_INT_EQ(-1, stockd_check_request_id("i/0123456789ABCDEF/1"));
    CHECK_INT_EQ(-1, stockd_check_request_id("i/0123456789abcdef/1/2"));
    CHECK_INT_EQ(-1, stockd_check_request_id(""));
}

static void view_and_pins(void) {
    stockd_config cfg;
    char err[256], addr[STOCKD_ADDR_MAX];
    char *argv[] = {"stockd",
                    "--lock",
                    "for-update",
                    "--route",
                    "owner",
                    "--peer-secret-file",
                    "/dev/null",
                    "--port",
                    "9001",
                    "--peers",
                    "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003",
                    "--route-pin",
                    "5=127.0.0.1:9003,6=127.0.0.1:9001"};
    CHECK_INT_EQ(0, stockd_config_parse(&cfg, 13, argv, err, sizeof(err)));
    CHECK_INT_EQ(0, stockd_route_setup(&cfg, false, err, sizeof(err)));
    CHECK(stockd_route_on());
    CHECK(strcmp(stockd_route_self(), "127.0.0.1:9001") == 0);
    CHECK_INT_EQ(STOCKD_OWNER_PEER, stockd_route_owner(5, addr, sizeof(addr)));
    CHECK(strcmp(addr, "127.0.0.1:9003") == 0);
    CHECK_INT_EQ(STOCKD_OWNER_SELF, stockd_route_owner(6, addr, sizeof(addr)));
    /* The others: as rendezvous over the three says. */
    const char *view[] = {"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"};
    unsigned peer = 0;
    for (int32_t p = 100; p < 400; p++) {
        int k = stockd_owner_pick(view, 3, p);
        stockd_owner o = stockd_route_owner(p, addr, sizeof(addr));
        CHECK_INT_EQ(k == 0 ? STOCKD_OWNER_SELF : STOCKD_OWNER_PEER, o);
        if (o == STOCKD_OWNER_PEER) {
            CHECK(strcmp(addr, view[k]) == 0);
            peer++;
        }
    }
    /* Three failures open a peer's circuit: it owns nothing here until it answers. */
    for (int i = 0; i < 3; i++)
        stockd_route_breaker_note("127.0.0.1:9002", false);
    CHECK(!stockd_route_breaker_allow("127.0.0.1:9002"));
    for (int32_t p = 100; p < 400; p++)
        if (stockd_route_owner(p, addr, sizeof(addr)) == STOCKD_OWNER_PEER)
            CHECK(strcmp(addr, "127.0.0.1:9003") == 0);
    stockd_route_breaker_note("127.0.0.1:9002", true);
    CHECK(stockd_route_breaker_allow("127.0.0.1:9002"));
    /* Modes none and local refuse to route. */
    char *local[] = {"stockd",   "--lock", "local", "--route", "owner", "--peer-secret-file",
                     "/dev/null"};
    CHECK_INT_EQ(-1, stockd_config_parse(&cfg, 7, local, err, sizeof(err)));
    CHECK(strstr(err, "--route owner needs a mode") != NULL);
    char *nosecret[] = {"stockd", "--lock", "zk", "--route", "owner"};
    CHECK_INT_EQ(-1, stockd_config_parse(&cfg, 5, nosecret, err, sizeof(err)));
    CHECK_INT_GT(peer, 100); /* about 2/3 of 300 */
}

int main(void) {
    rendezvous();
    frame_round_trip();
    bad_frames();
    answers();
    request_ids();
    view_and_pins();
    puts("ok");
    return 0;
}
