"""Per-item markers for tailprof, in pure Python (std lib only).

Mark where a thread starts and stops working on a data item (a request, query) so
``tailprof items`` can say why *this* one was slow::

    import tailprof_markers as tp
    with tp.item(req_id, cls="query"):
        handle(req)
    # or: tp.item_begin(req_id, cls="query"); ...; tp.item_end(req_id)

asyncio, where one thread interleaves many requests: one line of setup in the running
loop, then mark each request; the request's task is its current item exactly while it
runs between awaits (switch markers around every step of every task)::

    tp.install_asyncio()                   # in the running loop, e.g. first in main()
    async with tp.async_item(req_id, "query"):
        await handle(req)

Tasks created inside the block (``asyncio.gather``, ``create_task``) work on the same item
(they inherit it through their context). Event loops written by hand use
``item_switch(id)`` / ``item_switch_none()`` (docs/MARKERS.md, "Switch markers").

Same shared-memory protocol as include/tailprof.h (docs/MARKERS.md): records go into a
per-thread single-producer ring in the recorder's region; a full ring is counted, never
blocks. Timestamps are ``time.clock_gettime_ns(CLOCK_MONOTONIC)``, the trace clock.

Enabling: ``tailprof record -- python3 app.py`` puts the region path in
``TAILPROF_MARKERS``, read at import. A process started without tailprof can be attached
later (``tailprof record -p PID``, ``record -a``, the agent): at import the module creates
its control block (docs/MARKERS.md, "Control block") in a 128-byte ``memfd`` named
``tailprof_control``, mapped shared; it shows in ``/proc/PID/maps`` as
``/memfd:tailprof_control (deleted)``, where the recorder finds it, checks it and writes
the region's path, generation and state into it. Each thread notices the new generation
at its next marker and maps the region. Without a recorder a call is one read of the
block's ``state`` word (a memoryview subscript) and a branch. Where ``memfd_create`` is
missing, the block is private memory: the environment still works, attaching does not.

Class names: each thread writes the names it uses into its slot's small class table (16
entries, 59 bytes each); a 17th distinct class on one thread is recorded without class.

Caveats: slot allocation in the region is serialized by a Python lock, not an atomic, so
do not mix this module with the C/Rust library in one process. Record publication relies
on stores becoming visible in program order (x86-64).
"""

import collections.abc
import contextvars
import mmap
import os
import struct
import threading
import time
from contextlib import contextmanager

__all__ = ["item_begin", "item_end", "item", "enabled", "item_switch", "item_switch_none",
           "install_asyncio", "async_item", "item_trace", "current_item"]

ENV_VAR = "TAILPROF_MARKERS"
MAGIC = 0x314B524D46505454
VERSION = 1
CLOCK_MONOTONIC_ID = 1
SLOT_RING_OFFSET = 1280
SLOT_CLASSES = 16
KIND_BEGIN = 0
KIND_END = 1
KIND_SWITCH = 2
KIND_SWITCH_NONE = 3
KIND_TRACE_ID = 4
KIND_SPAN_ID = 5
HDR_FEATURES = 60
FEATURE_TRACE_CONTEXT = 1
RECORD = struct.Struct("<QQQI4x")
U64 = struct.Struct("<Q")
U32 = struct.Struct("<I")
HEADER = struct.Struct("<QIIQQIIIIIIII")  # magic .. next_slot, features
CONTROL_MEMFD = "tailprof_control"
CTL_SIZE = 128
CTL_STATE = 8
CTL_GENERATION = 16
CTL_PATH = 24
CTL_PATH_LEN = 96
STATE_OFF = 0
STATE_ON = 2

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


_region = None  # the region the control block named when last looked at
_bad_generation = 0  # a generation whose region could not be mapped (not retried)
_tls = threading.local()
_switch_lock = threading.Lock()


def _new_control():
    """The control block: (mmap or None, its u64 words). A shared memfd the recorder can
    find in /proc/PID/maps and write (``record -p``); private memory where there is no
    memfd_create (then only the environment enables markers)."""
    try:
        fd = os.memfd_create(CONTROL_MEMFD, os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None, memoryview(bytearray(CTL_SIZE)).cast("Q")
    try:
        os.ftruncate(fd, CTL_SIZE)
        mm = mmap.mmap(fd, CTL_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError:
        return None, memoryview(bytearray(CTL_SIZE)).cast("Q")
    finally:
        os.close(fd)  # the mapping keeps the memfd
    words = memoryview(mm).cast("Q")
    U32.pack_into(mm, 0, CTL_SIZE)
    U32.pack_into(mm, 4, VERSION)
    return mm, words


# The hot path reads _ctl[1] (``state``: 0 off, 2 on); _ctl[2] is ``generation``.
_ctl_mm, _ctl = _new_control()


def _control_path():
    raw = _ctl[CTL_PATH // 8:(CTL_PATH + CTL_PATH_LEN) // 8].tobytes()
    return os.fsdecode(raw.split(b"\0", 1)[0])


def _open_from_env():
    global _region
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        _region = _Region(path)
    except (OSError, ValueError):
        _region = None
        return
    # As the C library does: path, then generation, then state.
    raw = os.fsencode(path)[:CTL_PATH_LEN - 1]
    _ctl[CTL_PATH // 8:(CTL_PATH + CTL_PATH_LEN) // 8] = memoryview(
        raw.ljust(CTL_PATH_LEN, b"\0")).cast("Q")
    _ctl[CTL_GENERATION // 8] = _region.generation
    _ctl[CTL_STATE // 8] = STATE_ON


def _current_region():
    """The region the control block names now (mapped once per generation), or None."""
    r = _region
    g = _ctl[CTL_GENERATION // 8]
    if r is not None and r.generation == g:
        return r
    if g == _bad_generation or not _ctl[CTL_STATE // 8]:
        return None
    return _switch_region(g)


def _switch_region(g):
    # A recorder attached (again): the path was written before the generation.
    global _region, _bad_generation
    with _switch_lock:
        if _region is not None and _region.generation == g:
            return _region
        try:
            r = _Region(_control_path())
            if r.generation != g:
                raise ValueError("the region is not the control block's generation")
        except (OSError, ValueError):
            _bad_generation = g
            return None
        _region = r
        return r


def _after_fork_child():
    # The child is another process: its markers must not land in the parent's rings, and
    # the inherited control block is the parent's (shared): the child gets its own.
    global _region, _ctl_mm, _ctl
    _region = None
    old_mm, old = _ctl_mm, _ctl
    _ctl_mm, _ctl = _new_control()
    try:
        old.release()
        if old_mm is not None:
            old_mm.close()  # unmapped in the child only
    except BufferError:
        # A view of it is still alive (a thread of the parent was reading the block):
        # the child keeps the mapping but never reads or writes it again.
        pass


def enabled():
    """Whether a recorder is collecting this process's markers."""
    return bool(_ctl[CTL_STATE // 8]) and _current_region() is not None


def _thread(region):
    t = getattr(_tls, "t", None)
    if t is None or t.region is not region:
        t = _tls.t = _Thread(region)
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
    region = _region
    if region is None or region.generation != _ctl[2]:  # attached (again), or never
        region = _current_region()
        if region is None:
            return
    t = _thread(region)
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


def _emit_trace(item_id, trace_hi, trace_lo, span):
    """The trace-context pair, published with one head store (all or nothing)."""
    region = _current_region()
    if region is None:
        return
    t = _thread(region)
    if t.slot is None:
        t.region.count_noslot()
        return
    mm = t.region.mm
    (features,) = U32.unpack_from(mm, HDR_FEATURES)
    if not features & FEATURE_TRACE_CONTEXT:
        return  # an older recorder would reject these kinds
    ts = _clock(_MONO)
    mask = t.region.mask
    h = t.head
    if h + 1 - t.tail > mask:
        (t.tail,) = U64.unpack_from(mm, t.slot + 128)
        if h + 1 - t.tail > mask:
            (d,) = U64.unpack_from(mm, t.slot + 8)
            U64.pack_into(mm, t.slot + 8, d + 2)
            return
    ring = t.slot + SLOT_RING_OFFSET
    RECORD.pack_into(mm, ring + (h & mask) * RECORD.size, ts, trace_hi, trace_lo, KIND_TRACE_ID)
    RECORD.pack_into(mm, ring + ((h + 1) & mask) * RECORD.size, ts,
                     item_id & 0xFFFFFFFFFFFFFFFF, span, KIND_SPAN_ID)
    t.head = h + 2
    U64.pack_into(mm, t.slot + 64, h + 2)  # publish both


def item_trace(item_id, trace_id, span_id):
    """Trace context of item ``item_id`` (begun before on this thread): its
    OpenTelemetry/W3C trace id (an int < 2**128 or 16 bytes) and span id (an int < 2**64
    or 8 bytes), so ``tailprof items --trace-id`` finds the item. Written only when the
    recorder reads trace context."""
    if not _ctl[1]:
        return
    if isinstance(trace_id, (bytes, bytearray)):
        trace_id = int.from_bytes(trace_id, "big")
    if isinstance(span_id, (bytes, bytearray)):
        span_id = int.from_bytes(span_id, "big")
    _emit_trace(item_id, (trace_id >> 64) & 0xFFFFFFFFFFFFFFFF, trace_id & 0xFFFFFFFFFFFFFFFF,
                span_id & 0xFFFFFFFFFFFFFFFF)


def item_begin(item_id, cls=None):
    """The calling thread starts working on item ``item_id`` (optional class label)."""
    if _ctl[1]:
        _emit(item_id, cls, KIND_BEGIN)


def item_end(item_id):
    """The calling thread is done with item ``item_id``."""
    if _ctl[1]:
        _emit(item_id, None, KIND_END)


def item_switch(item_id):
    """Switch marker: the calling thread now works on item ``item_id`` (begun before,
    on any thread), e.g. an event loop dispatching to it."""
    if _ctl[1]:
        _emit(item_id, None, KIND_SWITCH)


def item_switch_none():
    """Switch marker: the calling thread now works on no item (back in its event loop)."""
    if _ctl[1]:
        _emit(0, None, KIND_SWITCH_NONE)


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


# ---- asyncio --------------------------------------------------------------------------

# The item the running task works on (None: none). A context variable: each task runs in
# its own context, and tasks created inside a request copy it, so they work on it too.
_current_item = contextvars.ContextVar("tailprof_current_item", default=None)


class _StepMarker(collections.abc.Coroutine):
    """Wraps a task's coroutine: the task calls ``send``/``throw`` once per step, in the
    task's context, so the step runs with the task's item current."""

    __slots__ = ("_coro",)

    def __init__(self, coro):
        self._coro = coro

    def send(self, value):
        it = _current_item.get()
        if it is not None:
            item_switch(it)
        try:
            return self._coro.send(value)
        finally:
            if _current_item.get() is not None:
                item_switch_none()

    def throw(self, typ, val=None, tb=None):
        it = _current_item.get()
        if it is not None:
            item_switch(it)
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)
        finally:
            if _current_item.get() is not None:
                item_switch_none()

    def close(self):
        return self._coro.close()

    def __await__(self):
        return self._coro.__await__()

    def __getattr__(self, name):
        # cr_frame, cr_code, __qualname__, ... for task names and debugging.
        return getattr(self._coro, name)


def install_asyncio(loop=None, always=False):
    """Mark every step of every task created from now on in ``loop`` (default: the
    running loop) with switch markers, so that ``async with async_item(...)`` makes the
    request's task current exactly while it runs. Chains a task factory already set.
    Returns False (and installs nothing) when no recorder collects this process's
    markers, so the uninstrumented path costs nothing (a recorder that attaches later,
    ``record -p``, then gets begin/end markers only; ``always=True`` installs anyway)."""
    if not always and not enabled():
        return False
    import asyncio
    loop = loop or asyncio.get_running_loop()
    prev = loop.get_task_factory()
    if getattr(prev, "_tailprof", False):
        return True

    def factory(loop, coro, **kwargs):
        if prev is not None:
            return prev(loop, _StepMarker(coro), **kwargs)
        return asyncio.Task(_StepMarker(coro), loop=loop, **kwargs)

    factory._tailprof = True
    loop.set_task_factory(factory)
    return True


def current_item():
    """The item the running asyncio task works on (set by ``async_item`` or
    ``set_task_item``), or None."""
    return _current_item.get()


def set_task_item(item_id):
    """Make ``item_id`` (begun before) the running task's item, as ``async_item`` does;
    returns a token for ``reset_task_item``. For integrations whose scope is not an
    ``async with`` block (``tailprof_markers.otel``)."""
    return _current_item.set(item_id)


def reset_task_item(token):
    """Undo ``set_task_item``; switches back to the enclosing item if there is one."""
    try:
        _current_item.reset(token)
    except (ValueError, RuntimeError):
        # Reset from another context (or twice) (a span ended elsewhere): leave this one alone.
        return
    outer = _current_item.get()
    if outer is not None:
        item_switch(outer)


class async_item:
    """``async with async_item(id, cls):``: the block is item ``id`` (begin at entry, end
    at exit). With ``install_asyncio()``, the task is current only while it runs, so the
    item's time waiting in ``await`` is not attributed to whatever else the loop runs.
    Without it this is ``item()``: overlapping requests on one thread are then reported
    as ambiguous."""

    __slots__ = ("_id", "_cls", "_token")

    def __init__(self, item_id, cls=None):
        self._id = item_id
        self._cls = cls
        self._token = None

    async def __aenter__(self):
        self._token = _current_item.set(self._id)
        item_begin(self._id, self._cls)
        return self

    async def __aexit__(self, typ, val, tb):
        item_end(self._id)
        _current_item.reset(self._token)
        outer = _current_item.get()
        if outer is not None:
            # The end left no item current; the enclosing item goes on.
            item_switch(outer)
        return False
