/* Cost of a begin+end marker pair, side by side in one process, medians of repeats.
 *   (a) tailprof markers, no recorder attached (disabled path)
 *   (b) tailprof markers enabled, writing into a region, with a drainer thread
 *   (c) two clock_gettime(CLOCK_MONOTONIC) reads (what (b) must stay within 1.5x of)
 *   (d) the paper prototype's approach: a timestamped log line per boundary (fprintf)
 *   (e) a uprobe hit on each of two empty functions (perf_event_open, uprobe PMU)
 * Usage: markers_cost [REPS] [PAIRS]. Prints a TSV row per repetition and method, then a
 * summary. Methods rotate order every repetition. Needs root (or perf_event_paranoid
 * permitting uprobes) for (e); (e) is skipped with a note otherwise. */
#include "tailprof.h"
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/ioctl.h>

#define NMETHODS 5
static const char *names[NMETHODS] = {"a_disabled", "b_enabled", "c_two_clock_reads", "d_fprintf_log",
                                      "e_uprobe"};
static volatile int stop_drainer;
static struct tailprof_region_header *region;
static FILE *logf;
static char region_path[96];
static volatile uint64_t sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Build a region the way the recorder does (docs/MARKERS.md) and enable this process. */
static void make_region(void)
{
    uint32_t nslots = 2, ring = 1u << 19; /* 16 MiB per thread: the drainer keeps up */
    uint32_t slot_size = TAILPROF_SLOT_RING_OFFSET + ring * 32;
    uint64_t size = 4096 + (uint64_t)nslots * slot_size;
    char *path = region_path;
    snprintf(path, sizeof region_path, "/dev/shm/tailprof-bench.%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
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
            uint64_t t = s->tail;
            for (uint64_t k = t; k < h; k++) /* touch what a real drainer copies */
                sink += ((struct tailprof_record *)((char *)s + TAILPROF_SLOT_RING_OFFSET))[k & (region->ring_records - 1)].time;
            __atomic_store_n(&s->tail, h, __ATOMIC_RELEASE);
        }
        usleep(1000);
    }
    return 0;
}

static int uprobe_open(const char *path, uint64_t off)
{
    FILE *f = fopen("/sys/bus/event_source/devices/uprobe/type", "r");
    int type = -1;
    if (!f || fscanf(f, "%d", &type) != 1)
        return -1;
    fclose(f);
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = (uint32_t)type;
    a.config1 = (uint64_t)(uintptr_t)path; /* uprobe_path */
    a.config2 = off;                       /* probe_offset */
    a.disabled = 1;
    a.exclude_kernel = 0;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* File offset of function `fn` in the file mapped at its address (from /proc/self/maps). */
static uint64_t file_offset(void *fn, char *path, size_t pathlen)
{
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    uint64_t a = (uint64_t)(uintptr_t)fn;
    while (m && fgets(line, sizeof line, m)) {
        unsigned long s, e, off;
        char perms[8], p[400] = "";
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %399s", &s, &e, perms, &off, p) >= 4 && a >= s && a < e) {
            snprintf(path, pathlen, "%s", p);
            fclose(m);
            return a - s + off;
        }
    }
    if (m)
        fclose(m);
    return 0;
}

static double run(int method, long pairs)
{
    uint64_t t0 = now_ns();
    struct timespec ts;
    for (long i = 0; i < pairs; i++) {
        switch (method) {
        case 0:
        case 1:
            tailprof_item_begin((uint64_t)i);
            __asm__ volatile("" ::: "memory");
            tailprof_item_end((uint64_t)i);
            break;
        case 2:
            clock_gettime(CLOCK_MONOTONIC, &ts);
            sink += (uint64_t)ts.tv_nsec;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            sink += (uint64_t)ts.tv_nsec;
            break;
        case 3:
            fprintf(logf, "%llu begin %ld\n", (unsigned long long)now_ns(), i);
            fprintf(logf, "%llu end %ld\n", (unsigned long long)now_ns(), i);
            break;
        case 4:
            tailprof_marker_begin((uint64_t)i);
            tailprof_marker_end((uint64_t)i);
            break;
        }
    }
    return (double)(now_ns() - t0) / (double)pairs;
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 11;
    long pairs = argc > 2 ? atol(argv[2]) : 2000000;
    long uprobe_pairs = pairs / 50 > 1000 ? pairs / 50 : 1000;
    double res[NMETHODS][64];
    char path[400];
    int ufd[2] = {-1, -1};
    pthread_t th;
    if (reps > 64)
        reps = 64;

    make_region();
    logf = fopen("/tmp/tailprof-bench-markers.log", "w");
    uint64_t off_b = file_offset((void *)tailprof_marker_begin, path, sizeof path);
    ufd[0] = uprobe_open(path, off_b);
    ufd[1] = uprobe_open(path, file_offset((void *)tailprof_marker_end, path, sizeof path));
    int have_uprobe = ufd[0] >= 0 && ufd[1] >= 0;
    if (!have_uprobe)
        fprintf(stderr, "note: cannot open uprobes (%s); (e) skipped\n", strerror(errno));
    pthread_create(&th, 0, drainer, 0);

    printf("rep\tmethod\tns_per_pair\n");
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < NMETHODS; k++) {
            int m = (k + r) % NMETHODS;
            long n = pairs;
            if (m == 0) {
                __atomic_store_n(&tailprof_control.state, TAILPROF_STATE_OFF, __ATOMIC_RELEASE);
            } else if (m == 1) {
                /* What the recorder does with process_vm_writev: path, generation, state. */
                memcpy(tailprof_control.path, region_path, sizeof region_path);
                __atomic_store_n(&tailprof_control.generation, region->generation, __ATOMIC_RELEASE);
                __atomic_store_n(&tailprof_control.state, TAILPROF_STATE_ON, __ATOMIC_RELEASE);
            } else if (m == 4) {
                if (!have_uprobe) {
                    res[m][r] = 0;
                    continue;
                }
                n = uprobe_pairs;
                ioctl(ufd[0], PERF_EVENT_IOC_ENABLE, 0);
                ioctl(ufd[1], PERF_EVENT_IOC_ENABLE, 0);
            }
            res[m][r] = run(m, n);
            if (m == 1)
                __atomic_store_n(&tailprof_control.state, TAILPROF_STATE_OFF, __ATOMIC_RELEASE);
            if (m == 4) {
                ioctl(ufd[0], PERF_EVENT_IOC_DISABLE, 0);
                ioctl(ufd[1], PERF_EVENT_IOC_DISABLE, 0);
            }
            printf("%d\t%s\t%.2f\n", r, names[m], res[m][r]);
        }
    }
    stop_drainer = 1;
    pthread_join(th, 0);

    uint64_t dropped = 0, written = 0;
    for (uint32_t i = 0; i < region->nslots && i < region->next_slot; i++) {
        struct tailprof_slot *s =
            (struct tailprof_slot *)((char *)region + region->slots_offset + (uint64_t)i * region->slot_size);
        dropped += s->dropped;
        written += s->head;
    }
    double med[NMETHODS];
    printf("\nmethod\tmedian_ns_per_pair\tmin\tmax\n");
    for (int m = 0; m < NMETHODS; m++) {
        qsort(res[m], (size_t)reps, sizeof(double), cmp);
        med[m] = res[m][reps / 2];
        printf("%s\t%.2f\t%.2f\t%.2f\n", names[m], med[m], res[m][0], res[m][reps - 1]);
    }
    printf("\nratio b/c (target <= 1.5): %.2f\n", med[1] / med[2]);
    printf("enabled records written: %llu, dropped (ring full): %llu\n", (unsigned long long)written,
           (unsigned long long)dropped);
    fclose(logf);
    unlink("/tmp/tailprof-bench-markers.log");
    unlink(region_path);
    return 0;
}
