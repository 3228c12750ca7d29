/* SPDX-License-Identifier: MIT */
/*
 * Linked by test_heap_fork (not preloaded): its constructor runs before the preloaded
 * heap's, so the fork handlers it registers come before the heap's own, the order in
 * which a prepare handler runs after the heap's and parent and child handlers before
 * (test_heap_fork.c, case atfork).  The handlers call what the test puts in the hooks.
 */
#include <pthread.h>
#include <stddef.h>

__attribute__((visibility("default"))) void (*heap_test_early_hook[3])(void);

static void run(int k)
{
    if (heap_test_early_hook[k] != NULL)
        heap_test_early_hook[k]();
}

static void prepare(void)
{
    run(0);
}

static void parent(void)
{
    run(1);
}

static void child(void)
{
    run(2);
}

__attribute__((constructor)) static void early_init(void)
{
    pthread_atfork(prepare, parent, child);
}
