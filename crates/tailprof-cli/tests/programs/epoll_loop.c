/* A C event loop (epoll over pipes) interleaving 24 requests of 4 parts each with switch
 * markers; it logs each request's CPU time ("truth"). Built by tests/async_items.rs and,
 * with -DTAILPROF_TEST_AGENT (wait for the agent to attach; a trace context per request),
 * by tests/agent_requests.rs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include "tailprof.h"

#define N 24
#define PARTS 4
static int fds[N][2];
static volatile unsigned long sink;

static unsigned long long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* One part of request `id`'s work: spin for ns of thread CPU time. */
__attribute__((noinline)) unsigned long long work_part(unsigned long long ns) {
    unsigned long long t0 = cpu_ns(), t;
    do {
        for (int i = 0; i < 100000; i++) sink += i;
        t = cpu_ns();
    } while (t - t0 < ns);
    return t - t0;
}

/* The clients: one byte per request per round, in a shuffled order, so that the loop
 * interleaves the requests' parts. */
static void *feeder(void *arg) {
    (void)arg;
    unsigned seed = 7;
    for (int round = 0; round < PARTS; round++) {
        int order[N];
        for (int i = 0; i < N; i++) order[i] = i;
        for (int i = N - 1; i > 0; i--) {
            int j = rand_r(&seed) % (i + 1), x = order[i];
            order[i] = order[j];
            order[j] = x;
        }
        for (int i = 0; i < N; i++) {
            if (write(fds[order[i]][1], "x", 1) != 1) exit(2);
            usleep(500);
        }
    }
    return 0;
}

int main(void) {
#ifdef TAILPROF_TEST_AGENT
    /* Wait (at most 20 s) for the agent to attach. */
    for (int w = 2000; w > 0 && __atomic_load_n(&tailprof_control.state, __ATOMIC_ACQUIRE) != TAILPROF_STATE_ON; w--)
        usleep(10000);
#endif
    int ep = epoll_create1(0);
    unsigned long long truth[N] = {0};
    int parts[N] = {0}, left = N * PARTS;
    for (int i = 0; i < N; i++) {
        if (pipe(fds[i])) return 1;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i][0], &ev);
    }
    pthread_t t;
    pthread_create(&t, 0, feeder, 0);
    while (left > 0) {
        struct epoll_event evs[8];
        int n = epoll_wait(ep, evs, 8, -1);
        for (int k = 0; k < n; k++) {
            int i = evs[k].data.u32;
            char c;
            if (read(fds[i][0], &c, 1) != 1) return 3;
            unsigned long id = 1000 + i;
            if (parts[i] == 0) {
                TAILPROF_ITEM_BEGIN_CLASS(id, "pipe");
#ifdef TAILPROF_TEST_AGENT
                /* A trace context per request (trace id ab..00NN): the store keeps it. */
                unsigned char tr[16] = {0xab}, sp[8] = {0};
                tr[15] = (unsigned char)(i + 1);
                sp[7] = (unsigned char)(i + 1);
                tailprof_item_trace(id, tr, sp);
#endif
            } else {
                tailprof_item_switch(id);
            }
            truth[i] += work_part((unsigned long long)(i % 6 + 1) * 2500000ull);
            if (++parts[i] == PARTS)
                tailprof_item_end(id);
            else
                tailprof_item_switch_none();
            left--;
        }
    }
    pthread_join(t, 0);
    for (int i = 0; i < N; i++) printf("truth %d %llu\n", 1000 + i, truth[i]);
    return 0;
}
