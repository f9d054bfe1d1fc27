"""Per-item markers for tailprof, in pure Python (std lib only).

Mark where a thread starts and stops working on a data item (a request, query) so
``tailprof items`` can say why *this* one was slow::

    import tailprof_markers as tp
    with tp.item(req_id, cls="query"):
        handle(req)
    # or: tp.item_begin(req_id, cls="query"); ...; tp.item_end(req_id)

Same shared-memory protocol as include/tailprof.h (docs/MARKERS.md): records go into a
per-thread single-producer ring in the recorder's region; a full ring is counted, never
blocks. Timestamps are ``time.clock_gettime_ns(CLOCK_MONOTONIC)``, the trace clock.

Enabling: environment only. ``tailprof record -- python3 app.py`` puts the region path
in ``TAILPROF_MARKERS``, read at import. ``tailprof record -p PID`` cannot enable a pure
Python process (there is no native ``tailprof_control`` symbol to write); use the C or
Rust library for servers that must be attachable. With no recorder, a call is one global
load and a branch.

Class names: each thread writes the names it uses into its slot's small class table (16
entries, 59 bytes each); a 17th distinct class on one thread is recorded without class.

Caveats: slot allocation in the region is serialized by a Python lock, not an atomic, so
do not mix this module with the C/Rust library in one process. Record publication relies
on stores becoming visible in program order (x86-64).
"""

import mmap
import os
import struct
import threading
import time
from contextlib import contextmanager

__all__ = ["item_begin", "item_end", "item", "enabled"]

ENV_VAR = "TAILPROF_MARKERS"
MAGIC = 0x314B524D46505454
VERSION = 1
CLOCK_MONOTONIC_ID = 1
SLOT_RING_OFFSET = 1280
SLOT_CLASSES = 16
RECORD = struct.Struct("<QQQI4x")
U64 = struct.Struct("<Q")
U32 = struct.Struct("<I")
HEADER = struct.Struct("<QIIQQIIIIIIII")  # magic .. next_slot, reserved0

_clock = time.clock_gettime_ns
_MONO = time.CLOCK_MONOTONIC


class _Region:
    def __init__(self, path):
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            head = os.pread(fd, HEADER.size, 0)
            if len(head) != HEADER.size:
                raise ValueError("short header")
            (magic, version, _hsize, size, generation, pid, clock, nslots, ring,
             slot_size, slots_off, _next, _r) = HEADER.unpack(head)
            if (magic != MAGIC or version != VERSION or pid != os.getpid()
                    or clock != CLOCK_MONOTONIC_ID or ring & (ring - 1)
                    or slot_size < SLOT_RING_OFFSET + ring * RECORD.size
                    or size < slots_off + nslots * slot_size):
                raise ValueError("not a tailprof marker region for this process")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.generation = generation
        self.nslots = nslots
        self.mask = ring - 1
        self.slot_size = slot_size
        self.slots_off = slots_off
        self.lock = threading.Lock()

    def claim(self):
        """A new slot for the calling thread, or None (every slot taken)."""
        with self.lock:
            (i,) = U32.unpack_from(self.mm, 56)
            U32.pack_into(self.mm, 56, i + 1)
        if i >= self.nslots:
            return None
        off = self.slots_off + i * self.slot_size
        U32.pack_into(self.mm, off + 4, threading.get_native_id())
        U32.pack_into(self.mm, off, 1)  # published after the tid
        return off

    def count_noslot(self):
        with self.lock:
            (n,) = U64.unpack_from(self.mm, 64)
            U64.pack_into(self.mm, 64, n + 1)


class _Thread:
    __slots__ = ("region", "slot", "head", "tail", "classes")

    def __init__(self, region):
        self.region = region
        self.slot = region.claim()
        self.head = 0
        self.tail = 0
        self.classes = {}


_region = None
_tls = threading.local()


def _open_from_env():
    global _region
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        _region = _Region(path)
    except (OSError, ValueError):
        _region = None


def _after_fork_child():
    # The child is another process: its markers must not land in the parent's rings.
    global _region
    _region = None


def enabled():
    """Whether a recorder is collecting this process's markers."""
    return _region is not None


def _thread():
    t = getattr(_tls, "t", None)
    if t is None or t.region is not _region:
        t = _tls.t = _Thread(_region)
    return t


def _class_ref(t, cls):
    idx = t.classes.get(cls)
    if idx is None:
        idx = len(t.classes)
        if idx >= SLOT_CLASSES:
            return 0
        name = cls.encode("utf-8")[:59]
        at = t.slot + 256 + idx * 64
        mm = t.region.mm
        mm[at + 4:at + 4 + len(name)] = name
        U32.pack_into(mm, at, len(name))  # published after the name
        t.classes[cls] = idx
    return idx << 1 | 1


def _emit(item_id, cls, kind):
    t = _thread()
    if t.slot is None:
        t.region.count_noslot()
        return
    ts = _clock(_MONO)
    mm = t.region.mm
    mask = t.region.mask
    h = t.head
    if h - t.tail > mask:
        (t.tail,) = U64.unpack_from(mm, t.slot + 128)
        if h - t.tail > mask:
            (d,) = U64.unpack_from(mm, t.slot + 8)
            U64.pack_into(mm, t.slot + 8, d + 1)
            return
    c = _class_ref(t, cls) if cls else 0
    RECORD.pack_into(mm, t.slot + SLOT_RING_OFFSET + (h & mask) * RECORD.size,
                     ts, item_id & 0xFFFFFFFFFFFFFFFF, c, kind)
    t.head = h + 1
    U64.pack_into(mm, t.slot + 64, h + 1)  # publish


def item_begin(item_id, cls=None):
    """The calling thread starts working on item ``item_id`` (optional class label)."""
    if _region is not None:
        _emit(item_id, cls, 0)


def item_end(item_id):
    """The calling thread is done with item ``item_id``."""
    if _region is not None:
        _emit(item_id, None, 1)


@contextmanager
def item(item_id, cls=None):
    """``with item(id, cls):`` marks the block as working on ``item_id``."""
    item_begin(item_id, cls)
    try:
        yield
    finally:
        item_end(item_id)


_open_from_env()
os.register_at_fork(after_in_child=_after_fork_child)
