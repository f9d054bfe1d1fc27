/*
 * queries: the sample application of Akiyama et al., "Diagnosing Performance
 * Fluctuations of High-throughput Software for Multi-core CPUs" (section IV.B, Fig. 7).
 *
 * Two threads pinned to cores 0 and 1 (both on core 0 on a 1-CPU machine). The feeder
 * produces queries {id, n} and passes them one by one through a queue; the worker
 * answers each query by running three functions over N = n x 1000 points:
 *
 *   load_points       generate the N input points             (always runs, cost ~ N)
 *   transform_points  linear transformations of the N points  (cached per n: only the
 *                     first query with a given n computes them, later ones copy)
 *   reduce_points     reduce the transformed points to a few numbers (always, ~ N)
 *
 * so the first query for each n is slow ("cold") and the others are fast ("warm"),
 * although they ask for exactly the same work. Each query is one tailprof item: the
 * worker wraps it in tailprof_item_begin_class / tailprof_item_end with the class label
 * "n=<n>", so items of the same n are compared with each other.
 *
 * For accuracy checks (the paper's Fig. 9) the worker also measures the true entry and
 * exit times (CLOCK_MONOTONIC, the trace clock) of every function call and of every
 * query, in memory, and writes them at exit to the file given by --log PATH or the
 * environment variable TAILPROF_QUERIES_LOG. Format, one record per line:
 *
 *   # comment
 *   query <id> <n> cold|warm <begin_ns> <end_ns>
 *   func <id> <function> <entry_ns> <exit_ns>
 *
 * Options: --queries Q (default 48), --scale S (work multiplier, default 1),
 * --gap-us U (feeder pause between queries, default 300), --log PATH, --no-realtime
 * (keep the worker a normal thread instead of SCHED_FIFO priority 1), --quiet.
 *
 * Build: cc -O1 -g -fno-omit-frame-pointer -pthread -I include -o queries queries.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tailprof.h"

#define MAX_QUERIES 4096
#define QUEUE_CAP 64
#define NUM_SIZES 4

static const int sizes[NUM_SIZES] = {10, 20, 30, 40};

/* Work per point, in passes; multiplied by --scale. Chosen so that on a ~3 GHz core a
 * warm query takes ~2-5 ms and a cold one several times more. */
#define LOAD_PASSES 40
#define TRANSFORM_PASSES 100
#define REDUCE_PASSES 70

struct query {
    uint64_t id;
    int n;
};

struct point {
    double x, y;
};

/* --- the queue between the two threads --------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    struct query q[QUEUE_CAP];
    unsigned head, tail; /* head: next to pop; tail: next free */
    int closed;
} queue = {.mu = PTHREAD_MUTEX_INITIALIZER, .not_empty = PTHREAD_COND_INITIALIZER, .not_full = PTHREAD_COND_INITIALIZER};

static void queue_push(struct query q)
{
    pthread_mutex_lock(&queue.mu);
    while (queue.tail - queue.head == QUEUE_CAP)
        pthread_cond_wait(&queue.not_full, &queue.mu);
    queue.q[queue.tail++ % QUEUE_CAP] = q;
    pthread_cond_signal(&queue.not_empty);
    pthread_mutex_unlock(&queue.mu);
}

static void queue_close(void)
{
    pthread_mutex_lock(&queue.mu);
    queue.closed = 1;
    pthread_cond_broadcast(&queue.not_empty);
    pthread_mutex_unlock(&queue.mu);
}

/* Returns 0 when the queue is closed and empty. */
static int queue_pop(struct query *out)
{
    pthread_mutex_lock(&queue.mu);
    while (queue.tail == queue.head && !queue.closed)
        pthread_cond_wait(&queue.not_empty, &queue.mu);
    int got = queue.tail != queue.head;
    if (got) {
        *out = queue.q[queue.head++ % QUEUE_CAP];
        pthread_cond_signal(&queue.not_full);
    }
    pthread_mutex_unlock(&queue.mu);
    return got;
}

/* --- truth log ------------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct truth {
    uint64_t id;
    int n, cold;
    uint64_t begin, end;
    uint64_t fn[3][2]; /* entry/exit of load, transform, reduce */
};

static const char *const fn_names[3] = {"load_points", "transform_points", "reduce_points"};
static struct truth truths[MAX_QUERIES];
static unsigned num_truths;

/* --- the three functions -------------------------------------------------------------- */

static unsigned scale = 1;
static volatile double sink; /* keeps results observable */

/* Transformed points cached per n (the in-memory result cache). */
static struct point *cache[NUM_SIZES];

static int size_index(int n)
{
    for (int i = 0; i < NUM_SIZES; i++)
        if (sizes[i] == n)
            return i;
    return -1;
}

__attribute__((noinline)) void load_points(struct point *pts, size_t count, uint64_t seed)
{
    for (unsigned pass = 0; pass < LOAD_PASSES * scale; pass++) {
        uint64_t s = seed * 2654435761u + 1;
        for (size_t i = 0; i < count; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            pts[i].x = (double)(s >> 40) * 0x1p-24;
            pts[i].y = (double)((s >> 16) & 0xffffff) * 0x1p-24;
        }
    }
}

__attribute__((noinline)) void transform_points(struct point *out, const struct point *in, size_t count, int n)
{
    int k = size_index(n);
    if (k >= 0 && cache[k]) { /* warm: the answer is cached */
        memcpy(out, cache[k], count * sizeof *out);
        return;
    }
    /* cold: apply a chain of linear transformations to every point */
    for (size_t i = 0; i < count; i++) {
        double x = in[i].x, y = in[i].y;
        for (unsigned pass = 0; pass < TRANSFORM_PASSES * scale; pass++) {
            double nx = 0.8 * x - 0.6 * y + 0.01;
            double ny = 0.6 * x + 0.8 * y - 0.02;
            x = nx;
            y = ny;
        }
        out[i].x = x;
        out[i].y = y;
    }
    if (k >= 0) {
        cache[k] = malloc(count * sizeof *out);
        if (cache[k])
            memcpy(cache[k], out, count * sizeof *out);
    }
}

__attribute__((noinline)) double reduce_points(const struct point *pts, size_t count)
{
    double acc = 0;
    for (unsigned pass = 0; pass < REDUCE_PASSES * scale; pass++) {
        double minx = 1e300, maxy = -1e300, sum = 0;
        for (size_t i = 0; i < count; i++) {
            if (pts[i].x < minx)
                minx = pts[i].x;
            if (pts[i].y > maxy)
                maxy = pts[i].y;
            sum += pts[i].x * pts[i].y;
        }
        acc += sum + minx - maxy;
    }
    return acc;
}

/* --- threads ---------------------------------------------------------------------------- */

static void pin_to_cpu(int cpu)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % ncpu, &set);
    /* Not fatal: a restricted cpuset simply leaves the thread unpinned. */
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Real-time priority for the worker (like a DPDK lcore on an isolated core): on a busy
 * machine other tasks would otherwise take the worker's core for whole scheduler ticks
 * and make random warm queries look slow. Best effort: without CAP_SYS_NICE the worker
 * stays a normal thread. --no-realtime turns it off. */
static int realtime = 1;

static void make_realtime(void)
{
    if (!realtime)
        return;
    struct sched_param sp = {.sched_priority = 1};
    (void)pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

static unsigned num_queries = 48;
static unsigned gap_us = 300;

static void *worker_main(void *arg)
{
    (void)arg;
    pin_to_cpu(1);
    make_realtime();
    /* One class label per n: items of the same n should behave alike. */
    static const struct tailprof_class class_of[NUM_SIZES] __attribute__((aligned(8))) = {
        {"n=10", __FILE__, __LINE__, 0},
        {"n=20", __FILE__, __LINE__, 0},
        {"n=30", __FILE__, __LINE__, 0},
        {"n=40", __FILE__, __LINE__, 0},
    };
    size_t max_count = (size_t)sizes[NUM_SIZES - 1] * 1000;
    struct point *in = malloc(max_count * sizeof *in);
    struct point *out = malloc(max_count * sizeof *out);
    if (!in || !out) {
        perror("queries: malloc");
        exit(1);
    }
    struct query q;
    while (queue_pop(&q)) {
        size_t count = (size_t)q.n * 1000;
        int k = size_index(q.n);
        struct truth *t = num_truths < MAX_QUERIES ? &truths[num_truths++] : NULL;
        int cold = k >= 0 && cache[k] == NULL;
        uint64_t t0 = now_ns();
        tailprof_item_begin_class(q.id, &class_of[k < 0 ? 0 : k]);
        uint64_t a = now_ns();
        load_points(in, count, (uint64_t)q.n);
        uint64_t b = now_ns();
        transform_points(out, in, count, q.n);
        uint64_t c = now_ns();
        sink = reduce_points(out, count);
        uint64_t d = now_ns();
        tailprof_item_end(q.id);
        uint64_t t1 = now_ns();
        if (t) {
            *t = (struct truth){q.id, q.n, cold, t0, t1, {{a, b}, {b, c}, {c, d}}};
        }
        /* A real-time thread that never sleeps is throttled by the kernel (it may use
         * only sched_rt_runtime_us of every second) and would lose whole 50 ms slices
         * in the middle of queries: idle for 1/8 of each query's time between queries. */
        if (realtime)
            usleep((useconds_t)((t1 - t0) / 8000 + 1));
    }
    free(in);
    free(out);
    return NULL;
}

/* Fisher-Yates with a fixed LCG: the same query sequence on every run. */
static void make_sequence(struct query *qs, unsigned count)
{
    for (unsigned i = 0; i < count; i++)
        qs[i] = (struct query){i + 1, sizes[i % NUM_SIZES]};
    uint64_t s = 42;
    for (unsigned i = count - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned j = (unsigned)((s >> 33) % (i + 1));
        int tmp = qs[i].n;
        qs[i].n = qs[j].n;
        qs[j].n = tmp;
    }
}

static int write_log(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "queries: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "# queries log v1: CLOCK_MONOTONIC nanoseconds; scale %u\n", scale);
    for (unsigned i = 0; i < num_truths; i++) {
        const struct truth *t = &truths[i];
        fprintf(f, "query %llu %d %s %llu %llu\n", (unsigned long long)t->id, t->n, t->cold ? "cold" : "warm",
                (unsigned long long)t->begin, (unsigned long long)t->end);
        for (int j = 0; j < 3; j++)
            fprintf(f, "func %llu %s %llu %llu\n", (unsigned long long)t->id, fn_names[j],
                    (unsigned long long)t->fn[j][0], (unsigned long long)t->fn[j][1]);
    }
    return fclose(f);
}

static unsigned parse_uint(const char *flag, const char *v)
{
    char *end;
    unsigned long x = v ? strtoul(v, &end, 10) : 0;
    if (!v || *end || x == 0 || x > 100000) {
        fprintf(stderr, "queries: %s needs a positive number\n", flag);
        exit(2);
    }
    return (unsigned)x;
}

int main(int argc, char **argv)
{
    const char *log_path = getenv("TAILPROF_QUERIES_LOG");
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--queries")) {
            num_queries = parse_uint(a, v), i++;
        } else if (!strcmp(a, "--scale")) {
            scale = parse_uint(a, v), i++;
        } else if (!strcmp(a, "--gap-us")) {
            gap_us = v ? (unsigned)strtoul(v, NULL, 10) : 0, i++;
        } else if (!strcmp(a, "--log") && v) {
            log_path = v, i++;
        } else if (!strcmp(a, "--no-realtime")) {
            realtime = 0;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else {
            fprintf(stderr, "usage: queries [--queries Q] [--scale S] [--gap-us U] [--log PATH] [--no-realtime] [--quiet]\n");
            return 2;
        }
    }
    if (num_queries > MAX_QUERIES)
        num_queries = MAX_QUERIES;
    struct query *qs = calloc(num_queries, sizeof *qs);
    if (!qs)
        return 1;
    make_sequence(qs, num_queries);

    pthread_t worker;
    if (pthread_create(&worker, NULL, worker_main, NULL) != 0) {
        perror("queries: pthread_create");
        return 1;
    }
    pin_to_cpu(0); /* the feeder is the main thread */
    for (unsigned i = 0; i < num_queries; i++) {
        queue_push(qs[i]);
        if (gap_us)
            usleep(gap_us);
    }
    queue_close();
    pthread_join(worker, NULL);

    if (!quiet) {
        uint64_t cold_ns = 0, warm_ns = 0;
        unsigned cold = 0;
        for (unsigned i = 0; i < num_truths; i++) {
            uint64_t d = truths[i].end - truths[i].begin;
            if (truths[i].cold)
                cold_ns += d, cold++;
            else
                warm_ns += d;
        }
        printf("queries: %u queries (%u cold: first of each n), mean cold %.2f ms, mean warm %.2f ms\n",
               num_truths, cold, cold ? cold_ns / 1e6 / cold : 0.0,
               num_truths > cold ? warm_ns / 1e6 / (num_truths - cold) : 0.0);
    }
    if (log_path && write_log(log_path) != 0)
        return 1;
    free(qs);
    return 0;
}
