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


def test_asyncio_steps_are_switch_markers(monkeypatch, tmp_path):
    """install_asyncio(): every step of a request's task runs between a switch to its item
    and a switch to none; the begin and end are the item's own; a task created inside the
    request works on the same item (context inheritance)."""
    import asyncio

    path = tmp_path / "region"
    make_region(path, os.getpid())
    tm = load(monkeypatch, path)

    async def child():
        await asyncio.sleep(0)

    async def req(i):
        async with tm.async_item(i, "req"):
            await asyncio.sleep(0)
            if i == 1:
                await asyncio.create_task(child())

    async def main():
        assert tm.install_asyncio()
        assert tm.install_asyncio(), "installing twice keeps one factory"
        await asyncio.gather(req(1), req(2))

    asyncio.run(main())
    state, tid, dropped, head, recs, classes = slot(path.read_bytes(), 0)
    assert dropped == 0
    got = [(kind, item if kind != 3 else 0) for _, item, _, kind in recs]
    B, E, S, N = 0, 1, 2, 3
    # Task 1 step 1, task 2 step 1, task 1 step 2 (creates the child), task 2 step 2 (ends),
    # the child's steps (item 1 inherited), then task 1 resumes after the child and ends.
    assert got[:4] == [(B, 1), (N, 0), (B, 2), (N, 0)], got
    assert got[-2:] == [(S, 1), (E, 1)], got
    assert (E, 2) in got and got[got.index((E, 2)) - 1] == (S, 2), got
    child_steps = [k for k in range(len(got) - 1) if got[k] == (S, 1) and got[k + 1] == (N, 0)]
    assert len(child_steps) >= 3, got  # task 1's second step and the child's two steps
    assert len(recs) == head


def test_asyncio_not_installed_without_recorder(monkeypatch):
    monkeypatch.delenv("TAILPROF_MARKERS", raising=False)
    import asyncio
    import tailprof_markers
    tm = importlib.reload(tailprof_markers)

    async def main():
        assert not tm.install_asyncio()
        assert asyncio.get_running_loop().get_task_factory() is None
        async with tm.async_item(5):
            await asyncio.sleep(0)

    asyncio.run(main())


def _set_features(path, bits):
    with open(path, "r+b") as f:
        f.seek(60)
        f.write(struct.pack("<I", bits))


def test_trace_context_only_when_the_recorder_reads_it(monkeypatch, tmp_path):
    """item_trace writes the trace-id/span-id pair (kinds 4, 5; ids as big-endian words)
    only when the header's features announce it; an older recorder gets nothing."""
    path = tmp_path / "region"
    make_region(path, os.getpid())
    tm = load(monkeypatch, path)
    trace_id = 0x4bf92f3577b34da6a3ce929d0e0e4736
    tm.item_begin(7)
    tm.item_trace(7, trace_id, 0x00f067aa0ba902b7)
    tm.item_end(7)
    assert [r[3] for r in slot(path.read_bytes(), 0)[4]] == [0, 1]
    path2 = tmp_path / "region2"
    make_region(path2, os.getpid())
    _set_features(path2, 1)
    tm = load(monkeypatch, path2)
    tm.item_begin(7)
    tm.item_trace(7, trace_id.to_bytes(16, "big"), bytes.fromhex("00f067aa0ba902b7"))
    tm.item_end(7)
    recs = slot(path2.read_bytes(), 0)[4]
    assert [(r[1], r[2], r[3]) for r in recs] == [
        (7, 0, 0), (0x4bf92f3577b34da6, 0xa3ce929d0e0e4736, 4), (7, 0x00f067aa0ba902b7, 5), (7, 0, 1)]
    assert recs[1][0] == recs[2][0], "one clock read for the pair"


def test_otel_span_processor(monkeypatch, tmp_path):
    """SERVER and root spans become items (class = span name, item id = span id, trace
    context written); INTERNAL child spans do not."""
    import pytest
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.trace import SpanKind
    except ImportError:
        pytest.skip("opentelemetry: the OpenTelemetry Python SDK is not installed")
    path = tmp_path / "region"
    make_region(path, os.getpid())
    _set_features(path, 1)
    tm = load(monkeypatch, path)
    from tailprof_markers.otel import TailprofSpanProcessor
    provider = TracerProvider()
    provider.add_span_processor(TailprofSpanProcessor())
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("GET /x", kind=SpanKind.SERVER) as s:
        with tracer.start_as_current_span("child"):
            pass
    c = s.get_span_context()
    state, tid, dropped, head, recs, classes = slot(path.read_bytes(), 0)
    got = [(r[1], r[2], r[3]) for r in recs]
    cls = got[0][1]
    assert classes[cls] == "GET /x"
    assert got == [(c.span_id, cls, 0), (c.trace_id >> 64, c.trace_id & (2**64 - 1), 4),
                   (c.span_id, c.span_id, 5), (c.span_id, 0, 1)]


def _control_mappings(pid="self"):
    """(start, inode) of every /memfd:tailprof_control mapping of a process."""
    out = []
    with open("/proc/%s/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip() == "/memfd:tailprof_control (deleted)":
                out.append((int(parts[0].split("-")[0], 16), int(parts[4])))
    return out


def _attach_as_recorder(path, generation, state=2):
    """What the recorder does for ``record -p``: find the memfd in /proc/PID/maps and write
    path, then generation, then state at its address in the process's memory."""
    (addr, _), = _control_mappings()
    fd = os.open("/proc/self/mem", os.O_RDWR)
    try:
        os.pwrite(fd, os.fsencode(str(path)).ljust(96, b"\0")[:96], addr + 24)
        os.pwrite(fd, struct.pack("<Q", generation), addr + 16)
        os.pwrite(fd, struct.pack("<Q", state), addr + 8)
    finally:
        os.close(fd)


def test_attach_later_through_the_memfd_control_block(monkeypatch, tmp_path):
    """Started without a recorder: the control block is a 128-byte memfd named
    tailprof_control in /proc/PID/maps, state 0; a recorder that writes a region there
    enables the markers (classes too), a second attach (new generation) moves every thread
    to the new region, and state 0 stops them."""
    monkeypatch.delenv("TAILPROF_MARKERS", raising=False)
    import tailprof_markers
    tm = importlib.reload(tailprof_markers)
    maps = _control_mappings()
    assert len(maps) == 1, maps
    addr, _ = maps[0]
    with open("/proc/self/mem", "rb") as mem:
        mem.seek(addr)
        size, version, state = struct.unpack("<IIQ", mem.read(16))
    assert (size, version, state) == (128, 1, 0)
    assert not tm.enabled()
    tm.item_begin(1, "before")  # nothing to write to: ignored
    first = tmp_path / "first"
    make_region(first, os.getpid(), generation=11)
    _attach_as_recorder(first, 11)
    assert tm.enabled()
    tm.item_begin(2, "query")
    tm.item_end(2)
    state, tid, dropped, head, recs, classes = slot(first.read_bytes(), 0)
    assert (state, tid, dropped, head) == (1, threading.get_native_id(), 0, 2)
    assert [(r[1], r[3]) for r in recs] == [(2, 0), (2, 1)] and classes[recs[0][2]] == "query"
    second = tmp_path / "second"
    make_region(second, os.getpid(), generation=13)
    _attach_as_recorder(second, 13)
    tm.item_begin(3)
    tm.item_end(3)
    assert slot(first.read_bytes(), 0)[3] == 2, "the old region gets nothing more"
    assert [(r[1], r[3]) for r in slot(second.read_bytes(), 0)[4]] == [(3, 0), (3, 1)]
    _attach_as_recorder(second, 13, state=0)
    assert not tm.enabled()
    tm.item_begin(4)
    assert slot(second.read_bytes(), 0)[3] == 2, "state 0: no more markers"


def test_attach_with_a_region_for_another_process_is_ignored(monkeypatch, tmp_path):
    monkeypatch.delenv("TAILPROF_MARKERS", raising=False)
    import tailprof_markers
    tm = importlib.reload(tailprof_markers)
    other = tmp_path / "other"
    make_region(other, os.getpid() + 1, generation=5)
    _attach_as_recorder(other, 5)
    assert not tm.enabled()
    tm.item_begin(1)
    assert slot(other.read_bytes(), 0)[3] == 0


def test_env_enabled_process_publishes_its_region_in_the_control_block(monkeypatch, tmp_path):
    """``record -- python3 app.py``: the block says on, with the environment's region, so
    the recorder can switch it off at the end like a C program's."""
    path = tmp_path / "region"
    make_region(path, os.getpid(), generation=9)
    load(monkeypatch, path)
    (addr, _), = _control_mappings()
    with open("/proc/self/mem", "rb") as mem:
        mem.seek(addr + 8)
        state, generation, raw = struct.unpack("<QQ96s", mem.read(112))
    assert (state, generation) == (2, 9)
    assert raw.split(b"\0", 1)[0] == os.fsencode(str(path))


def test_forked_child_gets_its_own_control_block(monkeypatch, tmp_path):
    """The memfd is shared across fork: the child must not keep (or write) the parent's."""
    monkeypatch.delenv("TAILPROF_MARKERS", raising=False)
    import tailprof_markers
    tm = importlib.reload(tailprof_markers)
    (_, parent_inode), = _control_mappings()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            maps = _control_mappings()
            tm.item_begin(1)
            ok = len(maps) == 1 and maps[0][1] != parent_inode and not tm.enabled()
            os.write(w, b"ok" if ok else repr(maps).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 4096)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"ok", got
    assert _control_mappings() == [(_control_mappings()[0][0], parent_inode)]


def test_install_asyncio_always_for_a_later_attach(monkeypatch):
    """Without a recorder install_asyncio() installs nothing, unless always=True: a program
    that expects `record -p` later gets its switch markers then."""
    monkeypatch.delenv("TAILPROF_MARKERS", raising=False)
    import asyncio
    import tailprof_markers
    tm = importlib.reload(tailprof_markers)

    async def main():
        assert not tm.install_asyncio()
        assert asyncio.get_running_loop().get_task_factory() is None
        assert tm.install_asyncio(always=True)
        assert asyncio.get_running_loop().get_task_factory() is not None
        async with tm.async_item(5):
            await asyncio.create_task(asyncio.sleep(0))

    asyncio.run(main())
