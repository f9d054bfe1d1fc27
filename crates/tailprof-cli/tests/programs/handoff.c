/* A request thread hands each request to a worker through a condition variable and waits;
 * one request in three takes the worker's slow path (15 ms of CPU in worker_slow_path).
 * Built by tests/causes.rs and, with -DTAILPROF_TEST_AGENT (wait for the agent to attach,
 * then a warm-up request), by tests/agent_requests.rs. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "tailprof.h"
static volatile unsigned long sink;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned long job = 0, done = 0;
static int quit = 0;
static long cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}
/* 15 ms of this thread's CPU time, the loop in this function itself. */
__attribute__((noinline)) void worker_slow_path(void) {
    long start = cpu_ns();
    do { for (unsigned i = 0; i < 50000; i++) sink += i; } while (cpu_ns() - start < 15000000L);
}
__attribute__((noinline)) void worker_fast_path(void) { for (unsigned i = 0; i < 20000; i++) sink += i; }
static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (job == done && !quit) pthread_cond_wait(&cv, &mu);
        if (quit) break;
        unsigned long j = job;
        pthread_mutex_unlock(&mu);
        if (j % 3 == 0) worker_slow_path(); else worker_fast_path();
        pthread_mutex_lock(&mu);
        done = j;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return 0;
}
int main(int argc, char **argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 30;
#ifdef TAILPROF_TEST_AGENT
    for (int w = 2000; w > 0 && __atomic_load_n(&tailprof_control.state, __ATOMIC_ACQUIRE) != TAILPROF_STATE_ON; w--)
        usleep(10000);
    /* A warm-up request: the agent opens the switch and wakeup events at the first
       marker it sees; give it 500 ms. */
    tailprof_item_begin(999);
    tailprof_item_end(999);
    usleep(500000);
#endif
    pthread_t t;
    if (pthread_create(&t, 0, worker, 0)) return 1;
    for (unsigned long id = 1; id <= n; id++) {
        tailprof_item_begin(id);
        pthread_mutex_lock(&mu);
        job = id;
        pthread_cond_broadcast(&cv);
        while (done != id) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        tailprof_item_end(id);
        usleep(1000);
    }
    pthread_mutex_lock(&mu);
    quit = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, 0);
    return 0;
}
