"""Egress probe run *inside* a sandbox (standard library only). Prints one JSON object.

probe_egress.py proxy <hex bytes> [unix-path]   send raw bytes to the proxy, read the answer
probe_egress.py hold <n> <hex bytes>            open n tunnels, then one more; report the last
probe_egress.py urlopen <url>                    urllib through $HTTP_PROXY (follows redirects)
probe_egress.py direct <ip> <port>               TCP connect without the proxy
probe_egress.py udp <ip> <port>                  one UDP datagram without the proxy
probe_egress.py dns <name>                       getaddrinfo inside the sandbox
probe_egress.py unix <path>                      connect to a Unix socket
probe_egress.py tls <host:port> <sni> <cafile> <hex request>
                                                 CONNECT, TLS with that SNI (verified
                                                 against cafile), send the request, read
probe_egress.py tunnel <host:port> <hex request> CONNECT, then the request in the clear
probe_egress.py upgrade <host:port|-> <hex request> <hex payload>
                                                 (CONNECT, unless -), the request, its answer
                                                 head, then payload out and its echo back

Answers carry ``status_line`` and ``eof``: whether the proxy ended the connection (rather
than the probe giving up after its 20 s socket timeout).
"""

import json
import os
import socket
import ssl
import sys
import urllib.error
import urllib.request

PROXY = ("127.0.0.1", 3128)


def _connect(path):
    if path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(20)
        sock.connect(path)
        return sock
    return socket.create_connection(PROXY, timeout=20)


def _answer(sock):
    data = b""
    eof = False
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            eof = True
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return {
        "status": status,
        "status_line": lines[0],
        "headers": headers,
        "body": body.decode("latin-1"),
        "eof": eof,
    }


def _established(sock, target):
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    established = b""
    while not established.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            break
        established += byte
    return established.split(b"\r\n")[0].decode("latin-1")


def _errno(exc):
    return {"error": type(exc).__name__, "errno": getattr(exc, "errno", None)}


def main(argv):
    kind = argv[0]
    if kind == "proxy":
        sock = _connect(argv[2] if len(argv) > 2 else None)
        sock.sendall(bytes.fromhex(argv[1]))
        return _answer(sock)
    if kind == "hold":
        held = []
        for _ in range(int(argv[1])):
            sock = _connect(None)
            sock.sendall(bytes.fromhex(argv[2]))
            line = b""
            while not line.endswith(b"\r\n\r\n"):
                line += sock.recv(1)
            held.append((sock, line.split(b"\r\n")[0].decode()))
        extra = _connect(None)
        extra.sendall(bytes.fromhex(argv[2]))
        result = _answer(extra)
        result["held"] = [status for _, status in held]
        return result
    if kind == "urlopen":
        try:
            with urllib.request.urlopen(argv[1], timeout=20) as response:
                return {"status": response.status, "body": response.read().decode()}
        except urllib.error.HTTPError as exc:
            return {
                "status": exc.code,
                "reason": exc.headers.get("X-Sandgate-Reason"),
                "url": exc.url,
            }
    if kind == "direct":
        try:
            socket.create_connection((argv[1], int(argv[2])), timeout=5).close()
            return {"connected": True}
        except OSError as exc:
            return _errno(exc)
    if kind == "udp":
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.sendto(b"\x00" * 12, (argv[1], int(argv[2])))
            return {"sent": True}
        except OSError as exc:
            return _errno(exc)
    if kind == "dns":
        try:
            return {"addresses": [i[4][0] for i in socket.getaddrinfo(argv[1], 443)]}
        except OSError as exc:
            return _errno(exc)
    if kind == "unix":
        try:
            _connect(argv[1]).close()
            return {"connected": True}
        except OSError as exc:
            return _errno(exc)
    if kind == "tunnel":
        sock = _connect(None)
        established = _established(sock, argv[1])
        sock.sendall(bytes.fromhex(argv[2]))
        return {"established": established, **_answer(sock)}
    if kind == "upgrade":
        sock = _connect(None)
        if argv[1] != "-":
            _established(sock, argv[1])
        sock.sendall(bytes.fromhex(argv[2]))
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            byte = sock.recv(1)
            if not byte:
                break
            head += byte
        payload = bytes.fromhex(argv[3])
        sock.sendall(payload)
        echoed = b""
        while len(echoed) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            echoed += chunk
        return {"head": head.decode("latin-1").split("\r\n"), "echo": echoed.decode("latin-1")}
    if kind == "tls":
        sock = _connect(None)
        _established(sock, argv[1])
        context = ssl.create_default_context(cafile=argv[3])
        context.check_hostname = False  # the probe names the SNI; the chain is still verified
        try:
            tls = context.wrap_socket(sock, server_hostname=argv[2])
        except (OSError, ssl.SSLError) as exc:
            return {"handshake": False, **_errno(exc)}
        names = [v for k, v in tls.getpeercert().get("subjectAltName", ()) if k == "DNS"]
        tls.sendall(bytes.fromhex(argv[4]))
        return {"handshake": True, "cert_names": names, **_answer(tls)}
    raise SystemExit(f"unknown probe {kind}")


if __name__ == "__main__":
    print(json.dumps({**main(sys.argv[1:]), "uid": os.getuid()}))
