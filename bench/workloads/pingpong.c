/* pingpong: two threads pass a byte back and forth through two pipes N times (every
 * round trip is two blocking reads, so about four context switches); prints the elapsed
 * CLOCK_MONOTONIC time in ns. A worst case for anything that costs per context switch.
 * Usage: pingpong [ROUND_TRIPS]   (default 100000)
 * Build: cc -O2 -pthread -o pingpong pingpong.c */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static long n = 100000;

static void *pong(void *arg)
{
    char c;
    (void)arg;
    for (long i = 0; i < n; i++) {
        if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1)
            exit(1);
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct timespec t0, t1;
    pthread_t t;
    char c = 'x';
    if (argc > 1)
        n = atol(argv[1]);
    if (pipe(ab) || pipe(ba) || pthread_create(&t, 0, pong, 0))
        return 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
            return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, 0);
    printf("%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
    return 0;
}
