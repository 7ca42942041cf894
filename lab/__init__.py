"""The lab: the machinery around stockd, in one place.

stockd is the thing under study; the lab is what runs it: the local stack of real
servers on loopback (stack, servers, proc), the port layout that the stack and the
CMake test set-up both read (ports, ports.json), the nginx configuration rendered from
one template for the native stack and for the container image (nginx), and the state
of a running stack (state). scripts/stack is a thin command line on it (cli).

Python 3 with the standard library and Debian's packages only (python3-pymysql). The
library raises LabError with a message for the operator; only the command lines print
and exit.
"""


class LabError(Exception):
    """An error the operator can act on; str() is the whole message."""
