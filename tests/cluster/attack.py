#!/usr/bin/env python3
"""The stranger's and the member's attacks of attack_test.sh on every listening socket.

attack.py SECRET|- TASK=PID...

SECRET is the plain job's secret file ("-" for a TLS job: then there is no member
here, and no guard greets). Exits 1 naming the first attack that was not refused.
"""
import hashlib
import hmac
import os
import resource
import select
import socket
import struct
import sys
import threading
import time

secret_path, tasks = sys.argv[1], [a.split("=") for a in sys.argv[2:]]
key = hashlib.sha256(open(secret_path, "rb").read()).digest() if secret_path != "-" else None
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Refusal(Exception):
    pass


def fail(text):
    raise Refusal(text)


def listening_ports(pid):
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
    """True when the node closed every one of `socks` within `seconds`."""
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


def member(port):
    """A connection that proved the job's secret to a guard (and the guard to it)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    hello = recv_exact(s, 40)
    ns, nc = hello[8:], os.urandom(32)
    s.sendall(nc + hmac.new(key, b"client" + ns + nc, hashlib.sha256).digest())
    proof = recv_exact(s, 32)
    if proof != hmac.new(key, b"server" + nc + ns, hashlib.sha256).digest():
        fail(f"port {port}: the guard did not prove the job's secret to a member")
    return s


def basp_header(payload):
    return struct.pack(">BBBBIQQQ", 1, 0, 0, 0, payload, 0, 0, 0)


def pad64(b):
    return b + b"\0" * (64 - len(b)) if len(b) < 64 else b


wrong_token = struct.pack("<II", 0x48445441, 1) + b"0" * 32
stranger = [("64 KiB of random bytes", os.urandom(65536)),
            ("an HTTP request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\r\n" * 20),
            ("200 KB of 0xff", b"\xff" * 200000),
            ("a BASP handshake announcing 256 MiB", pad64(basp_header(256 << 20))),
            ("a BASP handshake announcing 4 GiB", pad64(basp_header(0xFFFFFFF0))),
            ("a data-plane greeting with a wrong token", pad64(wrong_token))]

def attack(task, pid):
    ports = listening_ports(pid)
    if not ports:
        fail(f"{task} (pid {pid}) listens on no TCP socket")
    guards = [p for p in ports if greets(p)] if key else []
    print(f"{task} (pid {pid}) listens on {ports}" + (f", guards greet on {guards}" if key else ""), flush=True)
    if key and len(guards) != 1:
        fail(f"{task}: {len(guards)} sockets greet as a guard, not 1")
    for port in ports:
        socks = []
        for what, payload in stranger:
            s = socket.create_connection(("127.0.0.1", port))
            try:
                s.sendall(payload)
            except OSError:
                pass  # closed while we wrote: refused
            socks.append(s)
        # Plain: every one is closed (at once, or at the greeting's or handshake's
        # deadline). TLS: OpenSSL may wait for the rest of a record it never gets;
        # there the node only has to live on (checked by the caller).
        if key and not all_closed(socks, 15):
            fail(f"{task} port {port}: a stranger's connection was left open")
        for s in socks:
            s.close()
        if port in guards:
            for size in (256 << 20, 0xFFFFFFF0):
                s = member(port)
                s.sendall(basp_header(size))
                if not all_closed([s], 10):
                    fail(f"{task} port {port}: a member's BASP header announcing {size} bytes was let through")
                s.close()
    # 1,000 connections held open at once at the node's BASP port; a member still gets in.
    basp_port = guards[0] if key else ports[0]
    flood = []
    for _ in range(1000):
        try:
            flood.append(socket.create_connection(("127.0.0.1", basp_port), timeout=2))
        except OSError:
            pass  # the accept queue is full for a moment: the flood goes on
    if key:
        s = member(basp_port)  # proves the secret while the flood holds its slots
        s.close()
    print(f"{task}: {len(flood)} connections held open at port {basp_port}"
          + (", a member got in meanwhile" if key else ""), flush=True)
    for s in flood:
        s.close()


# Every node at once (the job must still be training when the last attack ends).
failures = []


def run(task, pid):
    try:
        attack(task, pid)
    except (Refusal, OSError) as e:
        failures.append(f"{task}: {e}")


threads = [threading.Thread(target=run, args=(t, p)) for t, p in tasks]
for t in threads:
    t.start()
for t in threads:
    t.join()
for f in failures:
    print("FAIL: " + f, flush=True)
if failures:
    sys.exit(1)
print("every stranger's connection was refused" + (", and every member's hostile header" if key else ""))
