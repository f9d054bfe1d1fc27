/* manyfuncs.c: a benchmark workload whose samples land on many different addresses.
 *
 * 256 distinct non-inlined functions (each with its own loop, so its own instruction
 * addresses) are called in a pseudo-random order with a skewed (roughly Zipf) weight, so a
 * profile has a long tail like real code. About a tenth of the time goes to libc (qsort,
 * memcpy, snprintf) and a little to the kernel (getppid, small writes to /dev/null), so
 * samples also fall in shared libraries and in the kernel.
 *
 *   cc -O1 -g -fno-omit-frame-pointer -pthread -o manyfuncs manyfuncs.c
 *   ./manyfuncs [threads] [milliseconds]     (default: 1 thread, 1000 ms)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef uint64_t (*work_fn)(uint64_t x, uint64_t n);

/* One function per name; the loop body mixes in the function's own address so that the
 * compiler cannot merge identical bodies. */
#define F(name)                                                                          \
    __attribute__((noinline)) uint64_t name(uint64_t x, uint64_t n)                      \
    {                                                                                    \
        uint64_t salt = (uint64_t)(uintptr_t)&name;                                      \
        for (uint64_t i = 0; i < n; i++) {                                               \
            x ^= x >> 31;                                                                \
            x *= 0x9e3779b97f4a7c15ULL + salt;                                           \
            x += i;                                                                      \
        }                                                                                \
        return x;                                                                        \
    }
#define F4(p) F(p##0) F(p##1) F(p##2) F(p##3)
#define F16(p) F4(p##0) F4(p##1) F4(p##2) F4(p##3)
#define F64(p) F16(p##0) F16(p##1) F16(p##2) F16(p##3)
#define F256(p) F64(p##0) F64(p##1) F64(p##2) F64(p##3)
F256(work_)

#define T(name) name,
#define T4(p) T(p##0) T(p##1) T(p##2) T(p##3)
#define T16(p) T4(p##0) T4(p##1) T4(p##2) T4(p##3)
#define T64(p) T16(p##0) T16(p##1) T16(p##2) T16(p##3)
#define T256(p) T64(p##0) T64(p##1) T64(p##2) T64(p##3)
static const work_fn table[] = { T256(work_) };
#define NFUNCS (sizeof table / sizeof table[0])

static long run_ms = 1000;
static volatile uint64_t sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) static uint64_t libc_work(uint64_t x, int devnull)
{
    uint32_t v[512];
    char buf[4096], out[4096];
    for (int i = 0; i < 512; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = (uint32_t)(x >> 32);
    }
    qsort(v, 512, sizeof v[0], cmp_u32);
    int len = 0;
    for (int i = 0; i < 64; i++)
        len += snprintf(buf + len, sizeof buf - (size_t)len, "%u,", v[i * 8] >> 8);
    for (int i = 0; i < 8; i++)
        memcpy(out, buf, sizeof buf);
    x += (uint64_t)getppid();
    if (devnull >= 0 && write(devnull, out, (size_t)len) < 0)
        x++;
    return x + (uint64_t)out[len / 2];
}

static void *worker(void *arg)
{
    uint64_t x = 0x243f6a8885a308d3ULL ^ (uint64_t)(uintptr_t)arg;
    int devnull = open("/dev/null", O_WRONLY);
    uint64_t end = now_ns() + (uint64_t)run_ms * 1000000ULL;
    while (now_ns() < end) {
        for (int round = 0; round < 64; round++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            /* Skewed choice: squaring a uniform value favours low indices. */
            uint64_t u = (x >> 40) & 0xffff;
            size_t k = (size_t)((u * u) >> 24) % NFUNCS;
            x = table[k](x, 200 + (x >> 58) * 50);
        }
        x = libc_work(x, devnull);
    }
    if (devnull >= 0)
        close(devnull);
    sink += x;
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2)
        run_ms = atol(argv[2]);
    if (n < 1 || n > 64 || run_ms < 0) {
        fprintf(stderr, "usage: manyfuncs [threads 1..64] [milliseconds]\n");
        return 2;
    }
    pthread_t t[64];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("%llu\n", (unsigned long long)(sink & 0xff));
    return 0;
}
