"""An asyncio server (std lib only) for tests/async_items.rs: one thread, N concurrent
requests over TCP on 127.0.0.1, each doing CPU work of a known, request-specific length
split into parts around awaits. Every request measures its own CPU time with
time.thread_time_ns around its work and the server prints `truth ID NS` per request.

argv: PYTHON_DIR N [plain]  ("plain": no install_asyncio, so requests overlap without
switch markers)."""

import asyncio
import sys
import time

sys.path.insert(0, sys.argv[1])
import tailprof_markers as tp  # noqa: E402

N = int(sys.argv[2])
PLAIN = len(sys.argv) > 3 and sys.argv[3] == "plain"
PARTS = 4
truth = {}


def burn(ns):
    """Spin for `ns` of this thread's CPU time; returns the CPU time measured."""
    t0 = time.thread_time_ns()
    x = 0
    while time.thread_time_ns() - t0 < ns:
        for i in range(200):
            x += i
    return time.thread_time_ns() - t0


async def handle(reader, writer):
    line = await reader.readline()
    rid = int(line)
    work = (rid % 10 + 1) * 6_000_000  # 6..60 ms of CPU, request-specific
    cpu = 0
    async with tp.async_item(rid, "req"):
        for _ in range(PARTS):
            cpu += burn(work // PARTS)
            await asyncio.sleep(0.002)  # wait: other requests run meanwhile
        writer.write(b"ok\n")
        await writer.drain()
    truth[rid] = cpu
    writer.close()


async def client(port, rid):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"%d\n" % rid)
    await writer.drain()
    assert await reader.readline() == b"ok\n"
    writer.close()


async def main():
    installed = False if PLAIN else tp.install_asyncio()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await asyncio.gather(*(client(port, rid) for rid in range(1, N + 1)))
    server.close()
    await server.wait_closed()
    print("enabled", int(tp.enabled()), "installed", int(installed))
    for rid, ns in sorted(truth.items()):
        print("truth", rid, ns)


asyncio.run(main())
