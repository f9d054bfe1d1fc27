/* threads.c: a multi-threaded program whose threads report their kernel thread ids.
 *
 * Prints one line "tid <TID>" per worker thread (flushed), then every thread spins
 * in busy_thread() for about the given number of milliseconds.
 *
 *   cc -O1 -g -pthread -o threads threads.c && ./threads [threads] [ms]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long ms_per_thread = 300;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void *busy_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&print_lock);
    printf("tid %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    pthread_mutex_unlock(&print_lock);
    volatile uint64_t x = 1;
    uint64_t end = now_ns() + (uint64_t)ms_per_thread * 1000000ULL;
    while (now_ns() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    if (argc > 2)
        ms_per_thread = atol(argv[2]);
    if (n < 1 || n > 64) {
        fprintf(stderr, "threads: thread count must be 1..64\n");
        return 2;
    }
    pthread_t t[64];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, busy_thread, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return 0;
}
