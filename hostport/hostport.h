/* hostport.h: the one parser of network addresses, "HOST:PORT" and comma lists of them,
 * for every module that names a server (lock/'s services, db/'s mysql:// URL, the
 * service's options). It sits below lock/ and db/ and calls nothing but libc.
 *
 * The grammar, the same for every caller:
 *   ADDR  = HOST [":" PORT]     (the port may be left out only where a caller gives a
 *                                default)
 *   HOST  = NAME | "[" IPV6 "]"
 *   NAME  = 1..255 of [A-Za-z0-9._-]   (a DNS name or an IPv4 address)
 *   IPV6  = 2..253 of [0-9A-Fa-f:.] with at least one ':'; the brackets are not kept
 *   PORT  = 1..5 decimal digits, 1..65535
 *   LIST  = ADDR *("," ADDR)    (no empty item, no whitespace, no item twice)
 * Whitespace is an error anywhere: a value read from a file or the environment is
 * trimmed by its reader, not here.
 *
 * Every call is pure and may be called from any thread. */
#ifndef STOCKD_HOSTPORT_H
#define STOCKD_HOSTPORT_H

#include <stddef.h>

/* A host's longest text, its NUL included. */
#define HOSTPORT_HOST_MAX 256

typedef struct hostport {
    char host[HOSTPORT_HOST_MAX]; /* without the brackets of an IPv6 address */
    int port;                     /* 1..65535 */
} hostport;

/* Parses the len bytes at s as one ADDR into *out. default_port 0: the port is required;
 * 1..65535: the port of an ADDR without one. Returns 0, or -1 (out untouched) when the
 * text is not an ADDR. */
int hostport_parse(const char *s, size_t len, int default_port, hostport *out);

/* Parses the NUL-terminated comma list s, port required. Fills out[0..n-1] when out is
 * not NULL, and returns n (1..max), or -1 when an item is malformed or empty, an item
 * repeats another (as written), or there are more than max items. */
int hostport_list_parse(const char *s, hostport *out, int max);

/* Writes hp back as an ADDR ("HOST:PORT", "[IPV6]:PORT") into buf (cap bytes). Returns
 * 0, or -1 when it does not fit. */
int hostport_format(const hostport *hp, char *buf, size_t cap);

#endif
