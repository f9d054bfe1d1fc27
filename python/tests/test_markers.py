"""tailprof_markers against a region built here the way the recorder builds it."""

import importlib
import os
import struct
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

NSLOTS, RING = 4, 16
SLOT_SIZE = 1280 + RING * 32
SIZE = 4096 + NSLOTS * SLOT_SIZE


def make_region(path, pid, generation=7):
    img = bytearray(SIZE)
    struct.pack_into("<QIIQQIIIIIII", img, 0, 0x314B524D46505454, 1, 4096, SIZE, generation,
                     pid, 1, NSLOTS, RING, SLOT_SIZE, 4096, 0)
    with open(path, "wb") as f:
        f.write(img)


def load(monkeypatch, path):
    monkeypatch.setenv("TAILPROF_MARKERS", str(path))
    import tailprof_markers
    return importlib.reload(tailprof_markers)


def slot(img, i):
    off = 4096 + i * SLOT_SIZE
    state, tid, dropped = struct.unpack_from("<IIQ", img, off)
    (head,) = struct.unpack_from("<Q", img, off + 64)
    recs = [struct.unpack_from("<QQQI", img, off + 1280 + k * 32) for k in range(min(head, RING))]
    classes = {}
    for k in range(16):
        (n,) = struct.unpack_from("<I", img, off + 256 + k * 64)
        if n:
            classes[k << 1 | 1] = bytes(img[off + 256 + k * 64 + 4: off + 256 + k * 64 + 4 + n]).decode()
    return state, tid, dropped, head, recs, classes


def test_disabled_without_env(monkeypatch):
    monkeypatch.delenv("TAILPROF_MARKERS", raising=False)
    import tailprof_markers
    tm = importlib.reload(tailprof_markers)
    assert not tm.enabled()
    tm.item_begin(1, "x")
    tm.item_end(1)
    with tm.item(2):
        pass


def test_two_threads(monkeypatch, tmp_path):
    path = tmp_path / "region"
    make_region(path, os.getpid())
    tm = load(monkeypatch, path)
    assert tm.enabled()
    tids = {}

    def work(t):
        tids[t] = threading.get_native_id()
        for i in range(5):
            with tm.item(t * 100 + i, cls="query" if t == 0 else None):
                pass

    ths = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    img = path.read_bytes()
    (claimed,) = struct.unpack_from("<I", img, 56)
    assert claimed == 2
    seen = set()
    for i in range(2):
        state, tid, dropped, head, recs, classes = slot(img, i)
        assert (state, dropped, head) == (1, 0, 10)
        t = recs[0][1] // 100
        seen.add(tid)
        assert tid == tids[t]
        for k, (time_ns, item, cls, kind) in enumerate(recs):
            assert item == t * 100 + k // 2
            assert kind == k % 2
            if t == 0 and kind == 0:
                assert classes[cls] == "query"
            else:
                assert cls == 0
        assert [r[0] for r in recs] == sorted(r[0] for r in recs)
    assert seen == set(tids.values())


def test_full_ring_is_counted(monkeypatch, tmp_path):
    path = tmp_path / "region"
    make_region(path, os.getpid())
    tm = load(monkeypatch, path)
    for i in range(20):
        tm.item_begin(i)
        tm.item_end(i)
    state, tid, dropped, head, recs, classes = slot(path.read_bytes(), 0)
    assert (head, dropped) == (RING, 40 - RING)


def test_region_of_another_process_is_ignored(monkeypatch, tmp_path):
    path = tmp_path / "region"
    make_region(path, os.getpid() + 1)
    tm = load(monkeypatch, path)
    assert not tm.enabled()
