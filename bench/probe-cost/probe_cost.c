/* Cost per probe hit (issue 22): one loop, every boundary kind compiled in, so each row of
 * bench/probe-cost.sh differs only in what the recorder attaches:
 *
 *     STAP_PROBE1(pc, start, i);     USDT site (a nop)
 *     fbegin(i);                     a function (entry uprobe; %return: uretprobe)
 *     [tailprof_item_begin(i);       the marker pair of tailprof.h, only with argv[2] = "m"
 *      tailprof_item_end(i);]
 *     fend(i);
 *     STAP_PROBE1(pc, done, i);
 *
 * Usage: probe_cost N [m]. Prints the loop's time per iteration in ns (CLOCK_MONOTONIC,
 * the program's own clock: the target's cost, not the recorder's). The N iterations run in
 * batches of BATCH with a 100 ms pause between batches, not timed, in which the recorder
 * drains its rings: the marker rings (4,096 records per thread) and the perf rings never
 * fill, so every row measures the recorded path, not a drop path. */
#include "tailprof.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <time.h>

#define BATCH 1000

volatile unsigned long sink;

__attribute__((noinline)) void fbegin(long i) { sink += (unsigned long)i; __asm__ volatile(""); }
__attribute__((noinline)) void fend(long i) { sink ^= (unsigned long)i; __asm__ volatile(""); }

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int markers = argc > 2 && strcmp(argv[2], "m") == 0;
    unsigned long long spent = 0;
    struct timespec pause = {0, 100 * 1000 * 1000};
    for (long b = 0; b < n; b += BATCH) {
        long end = b + BATCH < n ? b + BATCH : n;
        unsigned long long t0 = now_ns();
        for (long i = b + 1; i <= end; i++) {
            STAP_PROBE1(pc, start, i);
            fbegin(i);
            if (markers) {
                tailprof_item_begin((unsigned long long)i);
                tailprof_item_end((unsigned long long)i);
            }
            fend(i);
            STAP_PROBE1(pc, done, i);
        }
        spent += now_ns() - t0;
        nanosleep(&pause, NULL);
    }
    printf("%.1f\n", (double)spent / (double)n);
    return 0;
}
