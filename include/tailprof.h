/* tailprof.h: per-item markers for tailprof ("why was *this* request slow?").
 *
 * Header only, nothing to link. Mark where a thread starts and stops working on a data
 * item (a request, query, packet):
 *
 *     #include "tailprof.h"
 *     void handle(struct query *q) {
 *         TAILPROF_ITEM_BEGIN_CLASS(q->id, "query");   // class label: a static const
 *         ...                                           // descriptor, no per-call cost
 *         tailprof_item_end(q->id);
 *     }
 *
 * Event loops and coroutines, where one thread interleaves many items, also say which
 * item the thread works on between begin and end (switch markers, one record each):
 *
 *     tailprof_item_switch(conn->req_id);  // dispatching an event of this request
 *     handle_event(conn);
 *     tailprof_item_switch_none();         // back in the event loop
 *
 * Samples then go to the thread's current item; an item's time while not current is
 * reported as waiting (docs/MARKERS.md, "Switch markers").
 *
 * Then `tailprof record -- ./server` (the recorder passes TAILPROF_MARKERS in the
 * environment) or `tailprof record -p PID` (the recorder finds the exported
 * `tailprof_control` symbol and enables it with process_vm_writev).
 *
 * Cost: with no recorder attached each call is one relaxed load and a not-taken branch.
 * Enabled, a call reads CLOCK_MONOTONIC (vDSO) and appends a 32-byte record to this
 * thread's single-producer ring in the recorder's shared-memory region; a full ring bumps
 * the slot's dropped counter (never blocks, never silent). Protocol: docs/MARKERS.md.
 *
 * -DTAILPROF_DISABLE turns every call and macro into nothing (arguments are not
 * evaluated) and defines no symbols.
 * -DTAILPROF_MARKER_FUNCTIONS additionally calls the empty, never-inlined functions
 * tailprof_marker_begin/_end on every call, so a uprobe can find item boundaries even
 * when no recorder enables the rings.
 *
 * Needs Linux, gcc or clang (C99/C++11 or later, GNU or POSIX feature macros so that
 * clock_gettime and syscall are declared), x86-64 or aarch64.
 */
#ifndef TAILPROF_H
#define TAILPROF_H

#include <stdint.h>

#define TAILPROF_PROTOCOL_VERSION 1u

/* Record kinds (docs/MARKERS.md). Switch markers (2, 3) came later without a version
 * change: an older recorder rejects and counts them. Trace context (4, 5: an item's
 * OpenTelemetry trace id and span id) is written only when the region header's
 * `features` (offset 60) has TAILPROF_FEATURE_TRACE_CONTEXT; kinds 6..7 are reserved. */
#define TAILPROF_KIND_BEGIN 0u
#define TAILPROF_KIND_END 1u
#define TAILPROF_KIND_SWITCH 2u
#define TAILPROF_KIND_SWITCH_NONE 3u
#define TAILPROF_KIND_TRACE_ID 4u
#define TAILPROF_KIND_SPAN_ID 5u
#define TAILPROF_HDR_FEATURES 60
#define TAILPROF_FEATURE_TRACE_CONTEXT 1u

/* Class label descriptor: one `static const` per call site (see TAILPROF_ITEM_BEGIN_CLASS).
 * Records carry its address; the recorder reads the name from the process once. Must be at
 * least 8-byte aligned (the low bit of the address is reserved). */
struct tailprof_class {
    const char *name;
    const char *file;
    uint32_t line;
    uint32_t flags; /* reserved, 0 */
};

#ifdef TAILPROF_DISABLE

#define tailprof_item_begin(id) ((void)sizeof(id))
#define tailprof_item_end(id) ((void)sizeof(id))
#define tailprof_item_begin_class(id, cls) ((void)sizeof(id), (void)sizeof(cls))
#define TAILPROF_ITEM_BEGIN(id) ((void)sizeof(id))
#define TAILPROF_ITEM_END(id) ((void)sizeof(id))
#define TAILPROF_ITEM_BEGIN_CLASS(id, name) ((void)sizeof(id), (void)sizeof(name))
#define tailprof_item_switch(id) ((void)sizeof(id))
#define tailprof_item_switch_none() ((void)0)
#define tailprof_item_trace(id, trace_id, span_id) ((void)sizeof(id), (void)sizeof(trace_id), (void)sizeof(span_id))

#else /* !TAILPROF_DISABLE */

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- control block: exported, shared by every translation unit (weak) ---------------- */

enum { TAILPROF_STATE_OFF = 0, TAILPROF_STATE_INIT = 1, TAILPROF_STATE_ON = 2 };

/* The recorder writes `path`, then `generation`, then `state` (process_vm_writev) to
 * attach to a running process; 0 in `state` disables. Layout is part of the protocol. */
struct tailprof_control_block {
    uint32_t size;       /* sizeof(struct tailprof_control_block) = 128 */
    uint32_t version;    /* TAILPROF_PROTOCOL_VERSION */
    uint64_t state;      /* TAILPROF_STATE_*; the only word the disabled path reads */
    uint64_t generation; /* region generation; threads re-map when it changes */
    char path[96];       /* NUL-terminated region path */
    uint64_t reserved;
};

__attribute__((weak, visibility("default"), aligned(64))) struct tailprof_control_block
    tailprof_control = {128, TAILPROF_PROTOCOL_VERSION, TAILPROF_STATE_INIT, 0, {0}, 0};

/* ---- region layout (docs/MARKERS.md) ---------------------------------------------------- */

#define TAILPROF_REGION_MAGIC 0x314B524D46505454ull /* "TTPFMRK1" little-endian */
#define TAILPROF_CLOCK_MONOTONIC_ID 1u
#define TAILPROF_SLOT_CLASSES 16u

struct tailprof_region_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t region_size;
    uint64_t generation;
    uint32_t pid;
    uint32_t clock_id;
    uint32_t nslots;
    uint32_t ring_records; /* power of two */
    uint32_t slot_size;
    uint32_t slots_offset;
    uint32_t next_slot;    /* atomic bump allocator, may exceed nslots */
    uint32_t features;     /* TAILPROF_FEATURE_*: record kinds the recorder reads */
    uint64_t noslot_dropped; /* markers dropped because every slot was taken */
};

struct tailprof_record {
    uint64_t time;
    uint64_t item;
    uint64_t cls;  /* 0 none; odd: slot-local class (idx << 1 | 1); even: descriptor address */
    uint32_t kind; /* TAILPROF_KIND_*: 0 begin, 1 end, 2 switch, 3 switch to none */
    uint32_t reserved;
};

struct tailprof_slot {
    uint32_t state;   /* 0 free, 1 owned (written last, release) */
    uint32_t tid;
    uint64_t dropped; /* ring-full drops, written by the owner only */
    uint32_t nclasses;
    uint32_t reserved0;
    char pad0[64 - 24];
    uint64_t head;    /* records written (producer) */
    char pad1[56];
    uint64_t tail;    /* records consumed (recorder) */
    char pad2[56];
    char reserved1[64];
    struct { uint32_t len; char name[60]; } classes[TAILPROF_SLOT_CLASSES];
    /* struct tailprof_record ring[ring_records] follows (offset 1280) */
};

#define TAILPROF_SLOT_RING_OFFSET 1280u

/* Layout checks (docs/MARKERS.md): a negative array size fails the build. */
typedef char tailprof__check_record[sizeof(struct tailprof_record) == 32 ? 1 : -1];
typedef char tailprof__check_slot[sizeof(struct tailprof_slot) == TAILPROF_SLOT_RING_OFFSET ? 1 : -1];
typedef char tailprof__check_header[sizeof(struct tailprof_region_header) == 72 ? 1 : -1];
typedef char tailprof__check_control[sizeof(struct tailprof_control_block) == 128 ? 1 : -1];

/* ---- per-thread and per-process state -------------------------------------------------- */

struct tailprof__tls {
    uint64_t gen;                 /* generation this thread's slot belongs to */
    struct tailprof_slot *slot;   /* NULL: no slot (count into noslot_dropped) */
    struct tailprof_region_header *hdr;
    struct tailprof_record *ring;
    uint64_t head;                /* local copy of slot->head */
    uint64_t cached_tail;
    uint64_t mask;
};

__attribute__((weak)) __thread struct tailprof__tls tailprof__tls;

struct tailprof__proc {
    int lock;
    int atfork_done;
    uint64_t gen;
    struct tailprof_region_header *hdr;
};
__attribute__((weak)) struct tailprof__proc tailprof__proc;

/* Empty marker functions with stable names for uprobes (magic-trace style). */
__attribute__((weak, noinline, used, visibility("default"))) void tailprof_marker_begin(uint64_t id)
{
    __asm__ volatile("" : : "r"(id) : "memory");
}
__attribute__((weak, noinline, used, visibility("default"))) void tailprof_marker_end(uint64_t id)
{
    __asm__ volatile("" : : "r"(id) : "memory");
}

__attribute__((weak, noinline)) void tailprof__after_fork_child(void)
{
    /* The child is a different process: its markers must not land in the parent's rings. */
    __atomic_store_n(&tailprof_control.state, TAILPROF_STATE_OFF, __ATOMIC_RELAXED);
    tailprof__proc.gen = 0;
    tailprof__proc.hdr = 0;
    tailprof__proc.lock = 0;
    tailprof__tls.gen = 0;
    tailprof__tls.slot = 0;
}

/* Map the region named in the control block (called with tailprof__proc.lock held). */
__attribute__((weak, noinline)) struct tailprof_region_header *tailprof__map(uint64_t gen, const char *path)
{
    struct tailprof_region_header h;
    void *p;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != TAILPROF_REGION_MAGIC ||
        h.version != TAILPROF_PROTOCOL_VERSION || h.generation != gen ||
        h.pid != (uint32_t)getpid() || h.clock_id != TAILPROF_CLOCK_MONOTONIC_ID ||
        h.ring_records == 0 || (h.ring_records & (h.ring_records - 1)) != 0 ||
        h.slot_size < TAILPROF_SLOT_RING_OFFSET + h.ring_records * sizeof(struct tailprof_record) ||
        h.region_size < (uint64_t)h.slots_offset + (uint64_t)h.nslots * h.slot_size) {
        close(fd);
        return 0;
    }
    p = mmap(0, h.region_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? 0 : (struct tailprof_region_header *)p;
}

/* Slow path, once per thread per generation. Returns 1 when the thread may append. */
__attribute__((weak, noinline)) int tailprof__thread_setup(struct tailprof__tls *t)
{
    uint64_t st = __atomic_load_n(&tailprof_control.state, __ATOMIC_ACQUIRE);
    uint64_t gen;
    struct tailprof_region_header *hdr;
    uint32_t i;
    if (st == TAILPROF_STATE_INIT) {
        /* First call in a process launched by the recorder: the region is in the env. */
        const char *env = getenv("TAILPROF_MARKERS");
        struct tailprof_region_header h;
        int ok = 0;
        if (env && strlen(env) < sizeof tailprof_control.path) {
            int fd = open(env, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                ok = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
                     h.magic == TAILPROF_REGION_MAGIC && h.pid == (uint32_t)getpid();
                close(fd);
            }
        }
        while (__atomic_exchange_n(&tailprof__proc.lock, 1, __ATOMIC_ACQUIRE))
            ;
        if (__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) == TAILPROF_STATE_INIT) {
            if (ok) {
                memcpy(tailprof_control.path, env, strlen(env) + 1);
                __atomic_store_n(&tailprof_control.generation, h.generation, __ATOMIC_RELEASE);
            }
            __atomic_store_n(&tailprof_control.state, ok ? TAILPROF_STATE_ON : TAILPROF_STATE_OFF,
                             __ATOMIC_RELEASE);
        }
        __atomic_store_n(&tailprof__proc.lock, 0, __ATOMIC_RELEASE);
        st = __atomic_load_n(&tailprof_control.state, __ATOMIC_ACQUIRE);
    }
    if (st != TAILPROF_STATE_ON)
        return 0;
    gen = __atomic_load_n(&tailprof_control.generation, __ATOMIC_ACQUIRE);
    while (__atomic_exchange_n(&tailprof__proc.lock, 1, __ATOMIC_ACQUIRE))
        ;
    if (!tailprof__proc.atfork_done) {
        pthread_atfork(0, 0, tailprof__after_fork_child);
        tailprof__proc.atfork_done = 1;
    }
    if (tailprof__proc.gen != gen) {
        /* An older region stays mapped: a thread may still be writing into it. */
        tailprof__proc.hdr = tailprof__map(gen, tailprof_control.path);
        tailprof__proc.gen = gen;
    }
    hdr = tailprof__proc.hdr;
    __atomic_store_n(&tailprof__proc.lock, 0, __ATOMIC_RELEASE);
    t->gen = gen;
    t->slot = 0;
    t->hdr = hdr;
    if (!hdr)
        return 0;
    i = __atomic_fetch_add(&hdr->next_slot, 1, __ATOMIC_RELAXED);
    if (i >= hdr->nslots)
        return 1; /* no slot: every marker of this thread is counted in noslot_dropped */
    t->slot = (struct tailprof_slot *)((char *)hdr + hdr->slots_offset + (uint64_t)i * hdr->slot_size);
    t->ring = (struct tailprof_record *)((char *)t->slot + TAILPROF_SLOT_RING_OFFSET);
    t->mask = hdr->ring_records - 1;
    t->head = t->slot->head;
    t->cached_tail = t->slot->tail;
    t->slot->tid = (uint32_t)syscall(SYS_gettid);
    __atomic_store_n(&t->slot->state, 1, __ATOMIC_RELEASE);
    return 1;
}

/* No usable slot: set the thread up (new generation) or count the marker as dropped. */
__attribute__((weak, noinline)) int tailprof__slow(struct tailprof__tls *t)
{
    if (t->hdr && t->gen == __atomic_load_n(&tailprof_control.generation, __ATOMIC_RELAXED)) {
        if (t->slot)
            return 1;
        __atomic_fetch_add(&t->hdr->noslot_dropped, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (!tailprof__thread_setup(t))
        return 0;
    if (t->slot)
        return 1;
    __atomic_fetch_add(&t->hdr->noslot_dropped, 1, __ATOMIC_RELAXED);
    return 0;
}

static inline __attribute__((always_inline)) void tailprof__emit(uint64_t id, uint64_t cls, uint32_t kind)
{
    struct tailprof__tls *t = &tailprof__tls;
    struct timespec ts;
    struct tailprof_record *r;
    uint64_t h;
    if (__builtin_expect(t->slot == 0 ||
                             t->gen != __atomic_load_n(&tailprof_control.generation, __ATOMIC_RELAXED), 0)) {
        if (!tailprof__slow(t))
            return;
    }
    h = t->head;
    if (__builtin_expect(h - t->cached_tail > t->mask, 0)) {
        t->cached_tail = __atomic_load_n(&t->slot->tail, __ATOMIC_ACQUIRE);
        if (h - t->cached_tail > t->mask) {
            __atomic_store_n(&t->slot->dropped, t->slot->dropped + 1, __ATOMIC_RELAXED);
            return;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = &t->ring[h & t->mask];
    r->time = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    r->item = id;
    r->cls = cls;
    r->kind = kind;
    t->head = h + 1;
    __atomic_store_n(&t->slot->head, h + 1, __ATOMIC_RELEASE);
}

static inline uint64_t tailprof__be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

/* Appends the trace-context pair (TRACE_ID, SPAN_ID) with one head store, or nothing. */
static inline void tailprof__emit_trace(uint64_t id, const uint8_t trace_id[16], const uint8_t span_id[8])
{
    struct tailprof__tls *t = &tailprof__tls;
    struct timespec ts;
    struct tailprof_record *r;
    uint64_t h, now;
    if (__builtin_expect(t->slot == 0 ||
                             t->gen != __atomic_load_n(&tailprof_control.generation, __ATOMIC_RELAXED), 0)) {
        if (!tailprof__slow(t))
            return;
    }
    if (!(__atomic_load_n(&t->hdr->features, __ATOMIC_RELAXED) & TAILPROF_FEATURE_TRACE_CONTEXT))
        return; /* an older recorder: it would reject these kinds */
    h = t->head;
    if (h + 1 - t->cached_tail > t->mask) {
        t->cached_tail = __atomic_load_n(&t->slot->tail, __ATOMIC_ACQUIRE);
        if (h + 1 - t->cached_tail > t->mask) {
            __atomic_store_n(&t->slot->dropped, t->slot->dropped + 2, __ATOMIC_RELAXED);
            return;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    r = &t->ring[h & t->mask];
    r->time = now;
    r->item = tailprof__be64(trace_id);
    r->cls = tailprof__be64(trace_id + 8);
    r->kind = TAILPROF_KIND_TRACE_ID;
    r = &t->ring[(h + 1) & t->mask];
    r->time = now;
    r->item = id;
    r->cls = tailprof__be64(span_id);
    r->kind = TAILPROF_KIND_SPAN_ID;
    t->head = h + 2;
    __atomic_store_n(&t->slot->head, h + 2, __ATOMIC_RELEASE);
}

#ifdef TAILPROF_MARKER_FUNCTIONS
#define TAILPROF__MARKER_FN(f, id) f(id)
#else
#define TAILPROF__MARKER_FN(f, id) ((void)0)
#endif

/* The thread starts working on item `id`. */
static inline void tailprof_item_begin(uint64_t id)
{
    TAILPROF__MARKER_FN(tailprof_marker_begin, id);
    if (__builtin_expect(__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0, 0))
        tailprof__emit(id, 0, 0);
}

/* The thread starts working on item `id` of class `cls` (a static descriptor). */
static inline void tailprof_item_begin_class(uint64_t id, const struct tailprof_class *cls)
{
    TAILPROF__MARKER_FN(tailprof_marker_begin, id);
    if (__builtin_expect(__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0, 0))
        tailprof__emit(id, (uint64_t)(uintptr_t)cls, 0);
}

/* The thread is done with item `id`. */
static inline void tailprof_item_end(uint64_t id)
{
    TAILPROF__MARKER_FN(tailprof_marker_end, id);
    if (__builtin_expect(__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0, 0))
        tailprof__emit(id, 0, TAILPROF_KIND_END);
}

/* Switch marker: the thread now works on item `id` (begun before, on any thread), e.g. an
 * event loop dispatching one of its events or a coroutine resuming. Costs one marker. */
static inline void tailprof_item_switch(uint64_t id)
{
    if (__builtin_expect(__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0, 0))
        tailprof__emit(id, 0, TAILPROF_KIND_SWITCH);
}

/* Switch marker: the thread now works on no item (back in the event loop, a coroutine
 * suspended). */
static inline void tailprof_item_switch_none(void)
{
    if (__builtin_expect(__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0, 0))
        tailprof__emit(0, 0, TAILPROF_KIND_SWITCH_NONE);
}

/* Trace context of item `id`, begun before on this thread: its OpenTelemetry (W3C)
 * trace id (16 bytes) and span id (8 bytes). `tailprof items --trace-id` finds the item.
 * Written only when the recorder reads trace context (else nothing). */
static inline void tailprof_item_trace(uint64_t id, const uint8_t trace_id[16], const uint8_t span_id[8])
{
    if (__builtin_expect(__atomic_load_n(&tailprof_control.state, __ATOMIC_RELAXED) != 0, 0))
        tailprof__emit_trace(id, trace_id, span_id);
}

#define TAILPROF_ITEM_BEGIN(id) tailprof_item_begin(id)
#define TAILPROF_ITEM_END(id) tailprof_item_end(id)
/* `name` must be a string literal; the descriptor is a static const of the call site. */
#define TAILPROF_ITEM_BEGIN_CLASS(id, name)                                                  \
    do {                                                                                     \
        static const struct tailprof_class tailprof__site                                    \
            __attribute__((aligned(8))) = {name, __FILE__, __LINE__, 0};                     \
        tailprof_item_begin_class((id), &tailprof__site);                                    \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* TAILPROF_DISABLE */
#endif /* TAILPROF_H */
