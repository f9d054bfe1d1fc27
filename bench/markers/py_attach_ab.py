"""A/B of two versions of the Python marker module in one process, alternating every
repetition: begin+end pair cost disabled (no recorder) and enabled (region built here, as
py_cost.py does). Used for the memfd control block (docs/BENCHMARKS.md, "Marker cost").
Usage: python3 bench/markers/py_attach_ab.py PAIRS REPS OLD/__init__.py NEW/__init__.py
(e.g. OLD from `git show REV:python/tailprof_markers/__init__.py > /tmp/old/__init__.py`)."""
import importlib.util, os, statistics, struct, sys, time
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 21
ring = 1 << 20; slot_size = 1280 + ring * 32; size = 4096 + slot_size
def make_region(path):
    with open(path, "wb") as f:
        f.truncate(size); f.seek(0)
        f.write(struct.pack("<QIIQQIIIIIII", 0x314B524D46505454, 1, 4096, size, 9, os.getpid(), 1, 1, ring, slot_size, 4096, 0))
def run(tp):
    b, e = tp.item_begin, tp.item_end
    t0 = time.perf_counter_ns()
    for i in range(pairs):
        b(i); e(i)
    return (time.perf_counter_ns() - t0) / pairs
res = {}
for rep in range(reps):
    for tag, path in (("old", sys.argv[3]), ("new", sys.argv[4])):
        os.environ.pop("TAILPROF_MARKERS", None)
        tp = load("tp_" + tag, path)
        res.setdefault(tag + " disabled", []).append(run(tp))
        rp = "/dev/shm/tailprof-ab.%d" % os.getpid(); make_region(rp)
        os.environ["TAILPROF_MARKERS"] = rp
        tp = load("tp_" + tag, path); assert tp.enabled()
        res.setdefault(tag + " enabled", []).append(run(tp))
        os.unlink(rp)
for k, v in res.items():
    print("%-14s median %7.1f  min %7.1f ns/pair" % (k, statistics.median(v), min(v)))
