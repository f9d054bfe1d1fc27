/* Cost of a switch marker against a begin+end pair, enabled (region + drainer thread),
 * side by side in one process, medians of repeats (methods rotate every repetition):
 *   pair      tailprof_item_begin + tailprof_item_end
 *   switch    tailprof_item_switch (one marker: an event loop dispatching to an item)
 *   resume    tailprof_item_switch + tailprof_item_switch_none (a coroutine step)
 *   disabled  tailprof_item_switch with no recorder (the disabled path)
 *   trace     tailprof_item_trace (the trace-context pair, kinds 4 and 5: one clock read,
 *             two records, one head store), the region announcing the feature
 * Usage: switch_cost [REPS] [OPS]. Prints ns per operation (per pair / per marker). */
#include "tailprof.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMETHODS 5
static const char *names[NMETHODS] = {"c_begin_end_pair", "c_switch", "c_switch_plus_none", "c_switch_disabled",
                                      "c_trace_context"};
static const uint8_t trace_id[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                     0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
static const uint8_t span_id[8] = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
static volatile int stop_drainer;
static struct tailprof_region_header *region;
static char region_path[96];
static volatile uint64_t sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void make_region(void)
{
    uint32_t nslots = 2, ring = 1u << 19;
    uint32_t slot_size = TAILPROF_SLOT_RING_OFFSET + ring * 32;
    uint64_t size = 4096 + (uint64_t)nslots * slot_size;
    snprintf(region_path, sizeof region_path, "/dev/shm/tailprof-swbench.%d", (int)getpid());
    int fd = open(region_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror("region");
        exit(1);
    }
    region = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    memset(region, 0, 4096);
    region->version = 1;
    region->header_size = 4096;
    region->region_size = size;
    region->generation = 0x1234567;
    region->pid = (uint32_t)getpid();
    region->clock_id = 1;
    region->nslots = nslots;
    region->ring_records = ring;
    region->slot_size = slot_size;
    region->slots_offset = 4096;
    region->features = TAILPROF_FEATURE_TRACE_CONTEXT;
    __atomic_store_n(&region->magic, TAILPROF_REGION_MAGIC, __ATOMIC_RELEASE);
}

static void *drainer(void *arg)
{
    (void)arg;
    while (!stop_drainer) {
        for (uint32_t i = 0; i < region->nslots && i < region->next_slot; i++) {
            struct tailprof_slot *s =
                (struct tailprof_slot *)((char *)region + region->slots_offset + (uint64_t)i * region->slot_size);
            uint64_t h = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
            for (uint64_t k = s->tail; k < h; k++)
                sink += ((struct tailprof_record *)((char *)s + TAILPROF_SLOT_RING_OFFSET))[k & (region->ring_records - 1)].time;
            __atomic_store_n(&s->tail, h, __ATOMIC_RELEASE);
        }
        usleep(1000);
    }
    return 0;
}

static void enable(int on)
{
    if (on) {
        memcpy(tailprof_control.path, region_path, sizeof region_path);
        __atomic_store_n(&tailprof_control.generation, region->generation, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&tailprof_control.state, on ? TAILPROF_STATE_ON : TAILPROF_STATE_OFF, __ATOMIC_RELEASE);
}

static double run(int method, long ops)
{
    uint64_t t0 = now_ns();
    for (long i = 0; i < ops; i++) {
        switch (method) {
        case 0:
            tailprof_item_begin((uint64_t)i);
            __asm__ volatile("" ::: "memory");
            tailprof_item_end((uint64_t)i);
            break;
        case 1:
        case 3:
            tailprof_item_switch((uint64_t)i);
            __asm__ volatile("" ::: "memory");
            break;
        case 2:
            tailprof_item_switch((uint64_t)i);
            __asm__ volatile("" ::: "memory");
            tailprof_item_switch_none();
            break;
        case 4:
            tailprof_item_trace((uint64_t)i, trace_id, span_id);
            __asm__ volatile("" ::: "memory");
            break;
        }
    }
    return (double)(now_ns() - t0) / (double)ops;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 11;
    long ops = argc > 2 ? atol(argv[2]) : 2000000;
    double res[NMETHODS][64];
    pthread_t th;
    if (reps > 64)
        reps = 64;
    make_region();
    /* The trace context is written only when the region announces it: check it is. */
    enable(1);
    tailprof_item_begin(0);
    struct tailprof_slot *s0 = (struct tailprof_slot *)((char *)region + region->slots_offset);
    uint64_t h0 = __atomic_load_n(&s0->head, __ATOMIC_ACQUIRE);
    tailprof_item_trace(0, trace_id, span_id);
    tailprof_item_end(0);
    if (__atomic_load_n(&s0->head, __ATOMIC_ACQUIRE) != h0 + 3) {
        fprintf(stderr, "trace context not written: results invalid\n");
        return 1;
    }
    enable(0);
    pthread_create(&th, 0, drainer, 0);
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < NMETHODS; k++) {
            int m = (k + r) % NMETHODS;
            enable(m != 3);
            res[m][r] = run(m, ops);
            enable(0);
        }
    stop_drainer = 1;
    pthread_join(th, 0);
    /* Nothing may have been dropped: a full ring skips the clock read and looks cheap. */
    for (uint32_t i = 0; i < region->nslots && i < region->next_slot; i++) {
        struct tailprof_slot *s =
            (struct tailprof_slot *)((char *)region + region->slots_offset + (uint64_t)i * region->slot_size);
        if (s->dropped || region->noslot_dropped) {
            fprintf(stderr, "markers dropped (%llu in slot %u, %llu without a slot, next_slot %u): results invalid\n",
                    (unsigned long long)s->dropped, i, (unsigned long long)region->noslot_dropped, region->next_slot);
            return 1;
        }
    }
    unlink(region_path);
    for (int m = 0; m < NMETHODS; m++) {
        qsort(res[m], (size_t)reps, sizeof(double), cmp);
        printf("%s\t%.2f\n", names[m], res[m][reps / 2]);
    }
    return 0;
}
