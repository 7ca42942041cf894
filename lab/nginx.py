"""The nginx configuration, rendered from the one template nginx/nginx.conf.in for the
native stack (lab/servers.py, Nginx) and for the container image
(docker/nginx/entrypoint.sh runs `python3 -m lab.nginx container`).

The template's marker lines, each a comment alone on its line, are replaced with
directives indented as the marker was (or removed when there are none):
  #@MAIN@        the top-level settings: the native stack's private pid file, error
                 log and daemon mode, or the container's (workers per core, stderr)
  #@TEMP_PATHS@  the native stack's private temp directories (the image keeps Debian's)
  #@LIMIT_ZONE@  with a rate limit, its limit_req_zone keyed by the product id
  #@BALANCE@     with affinity, `hash $arg_id consistent;` (round-robin: nothing)
  #@SERVERS@     the upstream's server lines
  #@LIMIT_REQ@   with a rate limit, the limit_req of the deduction's location
and @LISTEN@ becomes the listen address (127.0.0.1:PORT, or 80 in the container), @WEB@
the folder of the live page's files (the repository's web/), and @PROM_PORT@ the port of
the stack's Prometheus on 127.0.0.1 (9, the discard port, where there is none: the
page's reads of it then fail plainly).

route is round-robin (the seed's experiment), affinity (every deduction of one
product goes to one instance while it is up; a server that refused a connection is
left out for 2 s so that its products move on) or owner (nginx round-robin, and the
stockd instances route each deduction to its product's owner among themselves:
`stockd --route owner`, docs/routing.md). Whatever the route, nginx never passes
/peer/ on: the instances' own endpoints are for peers only. rate_limit is empty (none) or
RATE[:BURST]: RATE per second, or N r/s, N r/m as nginx writes it; BURST requests above
it are let through at once (default RATE), the rest get 429 with a JSON body.
"""

import argparse
import os
import re
import sys

_SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(_SRC, "nginx", "nginx.conf.in")
ROUTES = ("round-robin", "affinity", "owner")
_RATE = re.compile(r"([1-9][0-9]{0,6})(r/s|r/m)?(?::([0-9]{1,7}))?")


class RenderError(ValueError):
    pass


def rate_limit_ok(text):
    return bool(_RATE.fullmatch(text))


def directives(route, rate_limit):
    """The balancer, limit-zone and limit lines for ROUTE and RATE_LIMIT (a dict of
    marker name to a list of lines)."""
    if route not in ROUTES:
        raise RenderError("not a route: '%s' (round-robin|affinity|owner)" % route)
    out = {"BALANCE": ["hash $arg_id consistent;"] if route == "affinity" else [],
           "LIMIT_ZONE": [], "LIMIT_REQ": []}
    if rate_limit:
        m = _RATE.fullmatch(rate_limit)
        if not m:
            raise RenderError("not a rate limit: '%s' (RATE[:BURST], e.g. 100:20, 600r/m:10)"
                              % rate_limit)
        rate = m.group(1) + (m.group(2) or "r/s")
        burst = m.group(3) if m.group(3) is not None else m.group(1)
        out["LIMIT_ZONE"] = ["limit_req_zone $arg_id zone=stockd_product:1m rate=%s;" % rate]
        out["LIMIT_REQ"] = ["limit_req zone=stockd_product burst=%s nodelay; limit_req_status 429;"
                            % burst]
    return out


def render(template, main, temp_paths, listen, servers, route="round-robin", rate_limit="",
           web=os.path.join(_SRC, "web"), prom_port=9):
    """The configuration from the text TEMPLATE. MAIN and TEMP_PATHS are lists of lines,
    LISTEN the listen address, SERVERS the upstream's HOST:PORT list."""
    fail = "max_fails=1 fail_timeout=2s" if route == "affinity" else "max_fails=0"
    text = dict(directives(route, rate_limit))
    text["MAIN"] = main
    text["TEMP_PATHS"] = temp_paths
    text["SERVERS"] = ["server %s %s;" % (s, fail) for s in servers]
    out = []
    for line in template.splitlines():
        m = re.fullmatch(r"([ \t]*)#@([A-Z_]+)@[ \t]*", line)
        if m:
            if m.group(2) not in text:
                raise RenderError("unknown marker #@%s@ in the template" % m.group(2))
            out += [m.group(1) + d for d in text[m.group(2)]]
            continue
        out.append(line.replace("@LISTEN@", listen).replace("@WEB@", web)
                   .replace("@PROM_PORT@", str(prom_port)))
    return "\n".join(out) + "\n"


def render_native(prefix, port, servers, route="round-robin", rate_limit="", template=TEMPLATE,
                  prom_port=9):
    """The native stack's nginx: private pid, logs and temp files under PREFIX, listening
    on 127.0.0.1:PORT only."""
    main = ["worker_processes 1;", "pid %s/nginx.pid;" % prefix,
            "error_log %s/logs/error.log warn;" % prefix, "daemon on;"]
    # The workers serve the live page from the checkout's web/. As nginx's default user
    # (nobody) they cannot read a checkout under a directory that only its owner may
    # enter (root's home, a `mktemp -d`), and the page answers 403. So a stack started
    # by root runs them as root, on loopback only; one started by another user already
    # runs them as that user.
    if os.geteuid() == 0:
        main.append("user root;")
    temp = ["%s_temp_path %s/tmp/%s;" % (k, prefix, v) for k, v in
            (("client_body", "body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"),
             ("uwsgi", "uwsgi"), ("scgi", "scgi"))]
    with open(template) as f:
        return render(f.read(), main, temp, "127.0.0.1:%d" % port, servers, route, rate_limit,
                      prom_port=prom_port)


def render_container(servers, route="round-robin", rate_limit="", template=TEMPLATE):
    """The image's nginx: Debian's paths, a worker per core, the log on stderr, port 80;
    the pid file and the foreground mode are the entrypoint's."""
    main = ["worker_processes auto;", "error_log /dev/stderr warn;"]
    with open(template) as f:
        return render(f.read(), main, [], "80", servers, route, rate_limit)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m lab.nginx",
                                description="Renders nginx/nginx.conf.in to stdout (or --out).")
    p.add_argument("target", choices=("native", "container"))
    p.add_argument("--upstream", action="append", default=[], metavar="HOST:PORT",
                   help="an upstream stockd (repeat)")
    p.add_argument("--prefix", help="native: the private directory of pid, logs and temp files")
    p.add_argument("--port", type=int, help="native: the port on 127.0.0.1")
    p.add_argument("--route", default="round-robin",
                   help="round-robin (default), affinity, or owner (nginx round-robin; stockd routes)")
    p.add_argument("--rate-limit", default="", help="RATE[:BURST]; empty or off: none")
    p.add_argument("--template", default=TEMPLATE)
    p.add_argument("--out", help="write here (renamed into place) instead of stdout")
    a = p.parse_args(argv)
    limit = "" if a.rate_limit == "off" else a.rate_limit
    try:
        if a.target == "native":
            if not a.prefix or not a.port:
                p.error("native needs --prefix and --port")
            text = render_native(a.prefix, a.port, a.upstream, a.route, limit, a.template)
        else:
            text = render_container(a.upstream, a.route, limit, a.template)
    except (RenderError, OSError) as e:
        print("lab.nginx: %s" % e, file=sys.stderr)
        return 2
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            f.write(text)
        os.replace(a.out + ".tmp", a.out)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
