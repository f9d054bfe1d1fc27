/* split.c: two functions that split CPU time 25/75 by construction.
 *
 * Both functions run the same inner kernel (an integer hash chain with no memory
 * traffic); work_quarter() runs it N times, work_three_quarters() 3N times, so a
 * sampling profiler should attribute ~25% and ~75% of the samples to them.
 *
 *   cc -O1 -g -fno-omit-frame-pointer -o split split.c && ./split [millions]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static volatile uint64_t sink;

static inline uint64_t kernel(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdULL;
        x ^= x >> 29;
    }
    return x;
}

__attribute__((noinline)) void work_quarter(uint64_t n)
{
    sink += kernel(sink + 1, n);
}

__attribute__((noinline)) void work_three_quarters(uint64_t n)
{
    sink += kernel(sink + 3, 3 * n);
}

int main(int argc, char **argv)
{
    /* Default: ~0.6 s of work on a typical 2-3 GHz core. */
    uint64_t millions = argc > 1 ? strtoull(argv[1], NULL, 10) : 200;
    const uint64_t slice = 100000; /* interleave so both see the same machine state */
    for (uint64_t done = 0; done < millions * 1000000ULL; done += 4 * slice) {
        work_quarter(slice);
        work_three_quarters(slice);
    }
    printf("%llu\n", (unsigned long long)(sink & 0xff));
    return 0;
}
