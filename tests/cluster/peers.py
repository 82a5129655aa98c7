"""What the attack scripts of tests/cluster share: the listening sockets of a process
(from /proc, not from what it advertises), reading, waiting for a close, and a member
of a job (a connection that proved the job's secret to a guard, or a TLS session with
the job's certificate)."""
import hashlib
import hmac
import os
import select
import socket
import ssl
import struct
import time


def listening_ports(pid):
    """The TCP ports process `pid` listens on, from /proc/PID/fd and /proc/net/tcp."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].split(":")[1], 16))
    return sorted(ports)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            break
        b += c
    return b


def all_closed(socks, seconds):
    """True when the peer closed every one of `socks` within `seconds`."""
    until, open_ = time.time() + seconds, list(socks)
    while open_ and time.time() < until:
        ready, _, _ = select.select(open_, [], [], 0.2)
        for s in ready:
            try:
                if not s.recv(65536):
                    open_.remove(s)
            except OSError:
                open_.remove(s)
    return not open_


def job_key(secret_path):
    return hashlib.sha256(open(secret_path, "rb").read()).digest()


def greets(port):
    """A plain node's guard greets first ("ATJOB1"); a data plane or TLS port waits."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(1)
    try:
        hello = recv_exact(s, 40)
    except socket.timeout:
        hello = b""
    s.close()
    return hello[:6] == b"ATJOB1"


def member(port, key):
    """A connection that proved the job's secret to the guard at `port` (and the guard
    to it); raises RuntimeError when the guard does not prove the key back."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    hello = recv_exact(s, 40)
    ns, nc = hello[8:], os.urandom(32)
    s.sendall(nc + hmac.new(key, b"client" + ns + nc, hashlib.sha256).digest())
    proof = recv_exact(s, 32)
    if proof != hmac.new(key, b"server" + nc + ns, hashlib.sha256).digest():
        raise RuntimeError(f"port {port}: the guard did not prove the job's secret to a member")
    return s


def basp_header(payload):
    """A BASP 0.17 client handshake header announcing `payload` bytes."""
    return struct.pack(">BBBBIQQQ", 1, 0, 0, 0, payload, 0, 0, 0)


def tls_member(port, certs):
    """A TLS session with the guard at `port`, holding the job's certificate from the
    directory `certs` (tools/make-certs); raises when the handshake fails or the guard
    sends nothing after it (a node that accepted us sends its BASP handshake)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # one identity per job: no name is checked
    ctx.load_cert_chain(f"{certs}/node.pem", f"{certs}/node.key")
    ctx.load_verify_locations(f"{certs}/ca.pem")
    raw = socket.create_connection(("127.0.0.1", port))
    raw.settimeout(10)
    s = ctx.wrap_socket(raw)
    if not s.recv(1):
        raise RuntimeError(f"port {port}: the guard closed a member's TLS session")
    return s
