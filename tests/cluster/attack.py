#!/usr/bin/env python3
"""The stranger's and the member's attacks of attack_test.sh on every listening socket.

attack.py SECRET|tls:CERTS TASK=PID...

SECRET is the plain job's secret file; for a TLS job, CERTS is the directory of the
job's certificates (tools/make-certs), which a member holds. Exits 1 naming the first
attack that was not refused.
"""
import os
import resource
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import all_closed, basp_header, greets, job_key, listening_ports, member, tls_member  # noqa: E402

proof, tasks = sys.argv[1], [a.split("=") for a in sys.argv[2:]]
certs = proof[4:] if proof.startswith("tls:") else None
key = None if certs else job_key(proof)


def join(port):
    """A member's connection to the guard at `port` (proved by the secret or the
    certificate)."""
    return tls_member(port, certs) if certs else member(port, key)


def is_guard(port):
    """Plain: the guard greets first. TLS: it completes a handshake with the job's
    certificate and then sends BASP's first bytes (a data plane port, TLS too, waits for
    the client's greeting and closes at its deadline)."""
    if not certs:
        return greets(port)
    try:
        join(port).close()
        return True
    except (OSError, RuntimeError):
        return False
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Refusal(Exception):
    pass


def fail(text):
    raise Refusal(text)


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
    guards = [p for p in ports if is_guard(p)]
    print(f"{task} (pid {pid}) listens on {ports}, the guard on {guards}", flush=True)
    if len(guards) != 1:
        fail(f"{task}: {len(guards)} sockets answer a member as a guard, not 1")
    for port in ports:
        socks = []
        for what, payload in stranger:
            s = socket.create_connection(("127.0.0.1", port))
            try:
                s.sendall(payload)
            except OSError:
                pass  # closed while we wrote: refused
            socks.append(s)
        # Every one is closed: at once, or at the deadline of the greeting, the TLS
        # handshake or the BASP handshake.
        if not all_closed(socks, 15):
            fail(f"{task} port {port}: a stranger's connection was left open")
        for s in socks:
            s.close()
        if port in guards:
            for size in (256 << 20, 0xFFFFFFF0):
                s = join(port)
                s.sendall(basp_header(size))
                if not all_closed([s], 10):
                    fail(f"{task} port {port}: a member's BASP header announcing {size} bytes was let through")
                s.close()
    # 1,000 connections held open at once at the node's BASP port; a member still gets in.
    basp_port = guards[0]
    flood = []
    for _ in range(1000):
        try:
            flood.append(socket.create_connection(("127.0.0.1", basp_port), timeout=2))
        except OSError:
            pass  # the accept queue is full for a moment: the flood goes on
    s = join(basp_port)  # proves membership while the flood holds the unproven slots
    s.close()
    print(f"{task}: {len(flood)} connections held open at port {basp_port}, a member got in meanwhile", flush=True)
    for s in flood:
        s.close()


# Every node at once (the job must still be training when the last attack ends).
failures = []


def run(task, pid):
    try:
        attack(task, pid)
    except (Refusal, RuntimeError, OSError) as e:
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
print("every stranger's connection was refused, and every member's hostile header")
