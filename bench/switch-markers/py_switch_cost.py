"""Python: cost of a switch marker against a begin+end pair (enabled, region built here,
ring large enough not to fill), of the trace-context pair (item_trace), and the overhead
of install_asyncio() on a request loop.
Medians of REPS repeats, methods in turn. Usage: python3 py_switch_cost.py [OPS] [REQS]

The asyncio part: REQS requests, 10 000 per second of wall time (a producer starts one
every 100 µs), each a task that does ~20 µs of work, awaits sleep(0) once and does ~20 µs
more inside `async with async_item(...)`; measured as the loop thread's CPU time per
request (time.thread_time_ns), markers enabled, with and without install_asyncio()."""
import asyncio
import importlib
import os
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import tailprof_markers as tp  # noqa: E402

ops = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
reqs = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
ring = 1 << 21
slot_size = 1280 + ring * 32
size = 4096 + slot_size
path = "/dev/shm/tailprof-pyswbench.%d" % os.getpid()


def enable():
    global tp
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(0)
        # ... next_slot 0, features: bit 0 = trace context (kinds 4, 5).
        f.write(struct.pack("<QIIQQIIIIIIII", 0x314B524D46505454, 1, 4096, size, 9, os.getpid(), 1,
                            1, ring, slot_size, 4096, 0, 1))
    os.environ["TAILPROF_MARKERS"] = path
    tp = importlib.reload(tp)
    assert tp.enabled()


def pair():
    b, e = tp.item_begin, tp.item_end
    t0 = time.perf_counter_ns()
    for i in range(ops):
        b(i)
        e(i)
    return (time.perf_counter_ns() - t0) / ops


def check():
    """Nothing dropped (a full ring would make markers look cheap)."""
    t = tp._tls.t
    assert struct.unpack_from("<Q", tp._region.mm, t.slot + 8)[0] == 0, "ring full: results invalid"


def switch():
    s = tp.item_switch
    t0 = time.perf_counter_ns()
    for i in range(ops):
        s(i)
    return (time.perf_counter_ns() - t0) / ops


TRACE_ID = 0x4bf92f3577b34da6a3ce929d0e0e4736
SPAN_ID = 0x00f067aa0ba902b7


def head():
    return struct.unpack_from("<Q", tp._region.mm, tp._tls.t.slot + 64)[0]


def trace():
    """item_trace: the trace-context pair (two records, one head store)."""
    tr = tp.item_trace
    h0 = head()
    t0 = time.perf_counter_ns()
    for i in range(ops):
        tr(i, TRACE_ID, SPAN_ID)
    dt = (time.perf_counter_ns() - t0) / ops
    assert head() == h0 + 2 * ops, "trace context not written: results invalid"
    return dt


def work(n):
    x = 0
    for i in range(n):
        x += i
    return x


def loop(install):
    async def req(i):
        async with tp.async_item(i, "req"):
            work(400)
            await asyncio.sleep(0)
            work(400)

    async def main():
        if install:
            assert tp.install_asyncio()
        tasks = []
        t_start = time.perf_counter()
        c0 = time.thread_time_ns()
        for i in range(reqs):
            tasks.append(asyncio.get_running_loop().create_task(req(i)))
            if i % 10 == 9:  # 10 per ms: 10 000 requests per second
                delay = t_start + (i + 1) / 10000 - time.perf_counter()
                await asyncio.sleep(max(delay, 0))
        await asyncio.gather(*tasks)
        return (time.thread_time_ns() - c0) / reqs

    return asyncio.run(main())


res = {"py_begin_end_pair": [], "py_switch": [], "py_trace_context": [], "asyncio_cpu_per_req_plain": [], "asyncio_cpu_per_req_installed": []}
for rep in range(5):
    enable()  # a fresh region each repetition: the rings never fill
    res["py_begin_end_pair"].append(pair())
    res["py_switch"].append(switch())
    res["py_trace_context"].append(trace())
    check()
    enable()
    res["asyncio_cpu_per_req_plain"].append(loop(False))
    enable()
    res["asyncio_cpu_per_req_installed"].append(loop(True))
    check()
os.unlink(path)
for k, v in res.items():
    print("%s\t%.0f" % (k, statistics.median(v)))
plain = statistics.median(res["asyncio_cpu_per_req_plain"])
inst = statistics.median(res["asyncio_cpu_per_req_installed"])
print("asyncio_overhead_ns_per_req\t%.0f" % (inst - plain))
print("asyncio_overhead_cpu_share_at_10k_per_s\t%.2f%%" % ((inst - plain) * 10000 / 1e9 * 100))
