/* fault_proxy_redis.h: the Redis hook of the fault proxy (fault_proxy.h). It cuts both
 * directions into whole RESP values (RESP2 and RESP3; the client's inline commands are
 * one line each) and passes every one: a base for faults at one command or reply (a lost
 * SET reply, a held EVALSHA), which need only a decide function on top. Stateless. */
#ifndef FAULT_PROXY_REDIS_H
#define FAULT_PROXY_REDIS_H

#include "fault_proxy.h"

fp_hook fp_redis_hook(void);

/* The length of the whole RESP value at the head of buf, 0 if it is not all there, -1
 * if buf does not hold RESP. Exposed for the proxy's own test. */
long fp_redis_value_len(const unsigned char *buf, size_t len);

#endif
