"""Python marker cost per begin+end pair: disabled, enabled (region built here, ring large
enough not to fill), and two time.clock_gettime_ns reads; medians of 7 repeats, in turn.
Usage: python3 bench/markers/py_cost.py [PAIRS]"""
import importlib
import os
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import tailprof_markers as tp  # noqa: E402

pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
ring = 1 << 20
slot_size = 1280 + ring * 32
size = 4096 + slot_size
path = "/dev/shm/tailprof-pybench.%d" % os.getpid()


def make_region():
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(0)
        f.write(struct.pack("<QIIQQIIIIIII", 0x314B524D46505454, 1, 4096, size, 9, os.getpid(), 1,
                            1, ring, slot_size, 4096, 0))


def run_markers():
    b, e = tp.item_begin, tp.item_end
    t0 = time.perf_counter_ns()
    for i in range(pairs):
        b(i)
        e(i)
    return (time.perf_counter_ns() - t0) / pairs


def run_clock():
    c, m = time.clock_gettime_ns, time.CLOCK_MONOTONIC
    t0 = time.perf_counter_ns()
    for _ in range(pairs):
        c(m)
        c(m)
    return (time.perf_counter_ns() - t0) / pairs


res = {"disabled": [], "enabled": [], "two_clock_reads": []}
for rep in range(7):
    os.environ.pop("TAILPROF_MARKERS", None)
    tp = importlib.reload(tp)
    res["disabled"].append(run_markers())
    make_region()  # fresh region: one slot, empty ring
    os.environ["TAILPROF_MARKERS"] = path
    tp = importlib.reload(tp)
    assert tp.enabled()
    res["enabled"].append(run_markers())
    assert struct.unpack_from("<Q", tp._region.mm, 4096 + 64)[0] == 2 * pairs  # nothing dropped
    res["two_clock_reads"].append(run_clock())
os.unlink(path)
for k, v in res.items():
    print("%s\t%.1f ns/pair (median of 7)" % (k, statistics.median(v)))
