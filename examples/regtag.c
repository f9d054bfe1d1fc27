/* Register-tag mode (the paper's section V.A): the current item id lives in r13.
 *
 * Build with r13 reserved for us everywhere in this file:
 *     cc -O1 -g -ffixed-r13 -o regtag regtag.c
 * Record:
 *     tailprof record --item-reg r13 -- ./regtag
 *
 * A tiny user-level "scheduler" interleaves the work of several items on one thread:
 * each item is a state machine advanced one slice at a time, round robin. Before a
 * slice runs, the scheduler writes the item's id into r13; between slices r13 is 0
 * (outside any item). A sample taken anywhere inside a slice carries r13 = the item id,
 * which is how samples are attributed when markers cannot tell (one OS thread runs
 * many items). r13 is callee-saved in the SysV ABI, so library calls preserve it.
 *
 * Usage: regtag [ITEMS [SLICES]]   (default 6 items of 40 slices)
 * Output: one line per item: "item ID n=N result=R".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

register uint64_t cur_item asm("r13");

/* Switch the current item. The empty asm "uses" r13, so the compiler cannot drop or
 * sink the store (nothing in C reads cur_item; only the profiler does). */
static inline void set_item(uint64_t id) {
    cur_item = id;
    __asm__ volatile("" : : "r"(cur_item) : "memory");
}

struct item {
    uint64_t id;
    int n;           /* work per slice, in thousands of points */
    int slices_left;
    double acc;
};

/* Three work functions, kept out of line so samples land in them. */
__attribute__((noinline)) double work_sum(int n) {
    double s = 0;
    for (int i = 0; i < n * 1000; i++) s += (double)i * 0.5;
    return s;
}

__attribute__((noinline)) double work_poly(int n) {
    double s = 0;
    for (int i = 0; i < n * 1000; i++) {
        double x = (double)i / (n * 1000.0);
        s += x * x * x - 2 * x * x + x;
    }
    return s;
}

__attribute__((noinline)) double work_mix(int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n * 1000; i++) h = (h ^ (uint64_t)i) * 1099511628211ull;
    return (double)(h & 0xffff);
}

/* One slice of an item's work, run with r13 = the item's id. */
__attribute__((noinline)) void run_slice(struct item *it) {
    it->acc += work_sum(it->n) + work_poly(it->n) + work_mix(it->n);
    it->slices_left--;
}

int main(int argc, char **argv) {
    int nitems = argc > 1 ? atoi(argv[1]) : 6;
    int slices = argc > 2 ? atoi(argv[2]) : 40;
    if (nitems < 1 || nitems > 1000 || slices < 1) {
        fprintf(stderr, "usage: regtag [ITEMS (1..1000) [SLICES]]\n");
        return 2;
    }
    struct item *items = calloc(nitems, sizeof *items);
    if (!items) return 1;
    for (int i = 0; i < nitems; i++) {
        items[i].id = 1001 + i; /* ids the test looks for */
        items[i].n = 200 + 100 * (i % 3);
        items[i].slices_left = slices;
    }
    int live = nitems;
    set_item(0);
    while (live > 0) {
        live = 0;
        for (int i = 0; i < nitems; i++) {
            if (items[i].slices_left == 0) continue;
            set_item(items[i].id); /* switch to item i */
            run_slice(&items[i]);
            set_item(0); /* back in the scheduler: outside any item */
            live++;
        }
    }
    for (int i = 0; i < nitems; i++)
        printf("item %llu n=%d result=%.6g\n", (unsigned long long)items[i].id, items[i].n, items[i].acc);
    free(items);
    return 0;
}
