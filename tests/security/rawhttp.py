#!/usr/bin/python3
"""rawhttp.py: sends hand-made requests over plain sockets and prints what came back, for
the requests that curl cannot or will not send (no Host header, a garbage request line,
bare LF line ends, a NUL inside the request line, duplicate Content-Length).

    rawhttp.py PORT REQUEST...   each REQUEST uses Python escapes: \\r\\n, \\x00, ...

Each request goes on a connection of its own, one after another: one interpreter for
many, since a loaded machine starts Python slowly. Prints one line per request, in
order: "STATUS<TAB>CONTENT-TYPE<TAB>BODY" for an answer (content type "-" when there is
none), or "CLOSED" when the server closed without answering, or "TIMEOUT". The body is
printed with newlines replaced by spaces."""
import socket
import sys


def send(port, request):
    """The one line for REQUEST (escaped) sent to PORT."""
    req = request.encode("latin-1").decode("unicode_escape").encode("latin-1")
    buf = b""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(req)
        while True:
            data = s.recv(65536)
            if not data:
                break
            buf += data
            head, sep, body = buf.partition(b"\r\n\r\n")
            if not sep:
                continue
            lengths = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            if lengths and len(body) >= int(lengths[0].split(b":", 1)[1]):
                break
    except socket.timeout:
        return "TIMEOUT"
    except ConnectionResetError:
        pass
    finally:
        s.close()
    if not buf:
        return "CLOSED"
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "?"
    ctype = "-"
    for line in lines[1:]:
        if line.lower().startswith("content-type:"):
            ctype = line.split(":", 1)[1].strip()
    text = body.decode("latin-1").replace("\r", " ").replace("\n", " ")
    return f"{status}\t{ctype}\t{text}"


def main():
    port = int(sys.argv[1])
    for request in sys.argv[2:]:
        print(send(port, request), flush=True)


if __name__ == "__main__":
    main()
