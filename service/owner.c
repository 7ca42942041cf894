/* owner.c: who owns a product, by rendezvous (highest random weight) hashing: every
 * member of the view scores the product, and the highest score owns it. Each instance
 * computes it alone from its view, with nothing to agree on but the view; when one
 * member joins or leaves, only the products it wins or won move (about 1/N of them),
 * and the others keep their owner, so their cached locks stay where they are. Pure;
 * unit-tested (tests/service/test_route.c). */
#include <string.h>

#include "stockd.h"

/* splitmix64's finaliser: a good 64-bit mix, so that the scores of one member for
 * neighbouring product ids are unrelated. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t stockd_owner_score(const char *member, int32_t product_id) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the member's address */
    for (const unsigned char *p = (const unsigned char *)member; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix64(h ^ mix64((uint64_t)(uint32_t)product_id + 0x9e3779b97f4a7c15ull));
}

int stockd_owner_pick(const char *const *members, size_t n, int32_t product_id) {
    int best = -1;
    uint64_t best_score = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = stockd_owner_score(members[i], product_id);
        /* A tie (never seen in practice) goes to the smaller address, so that every
         * instance breaks it the same way. */
        if (best < 0 || s > best_score ||
            (s == best_score && strcmp(members[i], members[best]) < 0)) {
            best = (int)i;
            best_score = s;
        }
    }
    return best;
}
