#!/usr/bin/env python3
"""A transparent TCP proxy that delays every byte by a fixed time, each way.

This kernel has no netem, so delay is made in user space: the test's nftables rule in a
host's namespace redirects that host's outgoing TCP connections to this proxy on
127.0.0.1 (`redirect to :PORT`); the proxy reads the address each connection was meant
for (SO_ORIGINAL_DST), dials it with its own sockets marked (SO_MARK) so the rule lets
them pass, and forwards each chunk --delay-ms after it arrived, in order. At most
--window bytes per direction wait in the proxy; beyond that it stops reading, so TCP's
own flow control holds the sender back. Connections end as their ends do: an end of
stream is forwarded after the same delay, an error closes both sides.

usage: delay_proxy.py --port P --delay-ms D [--mark M] [--window BYTES] [--ready FILE]
"""
import argparse
import asyncio
import socket
import struct
import sys

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h


def original_destination(sock):
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack("!2xH4s8x", raw)
    return socket.inet_ntoa(packed), port


async def forward(reader, writer, delay, window):
    """Copies reader to writer, each chunk `delay` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    room = asyncio.Condition()
    held = 0

    async def feed():
        nonlocal held
        while True:
            data = await reader.read(1 << 16)
            async with room:
                await room.wait_for(lambda: held < window)
                held += len(data)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                return

    async def drain():
        nonlocal held
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            async with room:
                held -= len(data)
                room.notify_all()

    await asyncio.gather(feed(), drain())


async def serve(client_reader, client_writer, args):
    loop = asyncio.get_running_loop()
    upstream = None
    try:
        host, port = original_destination(client_writer.get_extra_info("socket"))
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, args.mark)
        upstream.setblocking(False)
        await asyncio.wait_for(loop.sock_connect(upstream, (host, port)), 30)
        server_reader, server_writer = await asyncio.open_connection(sock=upstream)
        upstream = None
        try:
            await asyncio.gather(
                forward(client_reader, server_writer, args.delay, args.window),
                forward(server_reader, client_writer, args.delay, args.window),
            )
        finally:
            server_writer.close()
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        if upstream is not None:
            upstream.close()
        client_writer.close()


async def main():
    p = argparse.ArgumentParser(description="delays every byte of redirected TCP connections")
    p.add_argument("--port", type=int, required=True, help="port to listen on, on 127.0.0.1")
    p.add_argument("--delay-ms", type=float, required=True, help="delay of each direction")
    p.add_argument("--mark", type=int, default=0x2A, help="SO_MARK of the proxy's own connections")
    p.add_argument("--window", type=int, default=8 << 20, help="bytes held per direction at most")
    p.add_argument("--ready", help="file written once listening")
    args = p.parse_args()
    if args.delay_ms < 0 or args.window <= 0:
        sys.exit("delay_proxy: --delay-ms must be >= 0 and --window > 0")
    args.delay = args.delay_ms / 1000.0
    server = await asyncio.start_server(lambda r, w: serve(r, w, args), "127.0.0.1", args.port)
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("ready\n")
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
