/* SPDX-License-Identifier: MIT */
/*
 * The ARCOMM_* variables that are not knobs, and the "did you mean" check of the
 * environment that comm_init and arinfo share.
 */
#include "env_vars.h"
#include "comm_base.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

const struct rt_env_var rt_env_arrun_vars[] = {
    {"ARCOMM_RANK", "arrun", "set by arrun", "this rank (comm_init_env)"},
    {"ARCOMM_SIZE", "arrun", "set by arrun", "the number of ranks (comm_init_env)"},
    {"ARCOMM_LOCAL_RANK", "arrun", "set by arrun", "this rank on its host (comm_init_env)"},
    {"ARCOMM_LOCAL_SIZE", "arrun", "set by arrun", "the ranks on this host"},
    {"ARCOMM_ID", "arrun", "set by arrun", "the communicator's id (comm_init_env)"},
    {"ARCOMM_DEVICE", "arrun", "set by arrun --device", "host, cuda or hexagon (comm_init_env)"},
};
const size_t rt_env_arrun_count = sizeof(rt_env_arrun_vars) / sizeof(rt_env_arrun_vars[0]);

const struct rt_env_var rt_env_other_vars[] = {
    {"ARCOMM_PMPI", "libarcomm_pmpi", "on",
     "off (0, no, false): every MPI call goes to Open MPI untouched, nothing counted"},
    {"ARCOMM_PMPI_MIN_BYTES", "libarcomm_pmpi", "per call, measured",
     "smallest message (bytes, K or M suffix) arcomm serves, for every call; smaller ones "
     "go to Open MPI (docs/pmpi.md)"},
    {"ARCOMM_PMPI_PROGRESS_US", "libarcomm_pmpi", "100",
     "how often (microseconds, 1 to 1000000) a served call that waits drives MPI's progress"},
    {"ARCOMM_HEAP_BYTES", "libarcomm_heap", "physical memory, at most 1T",
     "address space of the shared heap (K, M, G or T suffix; sparse: memory only for what is "
     "allocated); 0: no heap, every allocation glibc's"},
    {"ARCOMM_HEAP_MIN", "libarcomm_heap", "64K",
     "smallest allocation the shared heap serves (smaller ones are glibc's); peers reach "
     "buffers in the heap in one pass"},
    {"ARCOMM_LIBRARY", "python", "the build tree's, then an installed one",
     "the libarcomm.so the Python package loads"},
    {"ARCOMM_MPI_LIBRARY", "python", "beside the libarcomm loaded, then an installed one",
     "the libarcomm_mpi.so the Python package loads for Comm.from_mpi"},
    {"ARCOMM_TORCH_NATIVE", "python", "1",
     "0: arcomm.torch serves every call from its Python process group, without building or "
     "loading its C++ backend"},
};
const size_t rt_env_other_count = sizeof(rt_env_other_vars) / sizeof(rt_env_other_vars[0]);

/* Switches of arcomm's own test suite (ARCOMM_TEST_QUICK): not the library's. */
#define TEST_PREFIX "ARCOMM_TEST_"

static bool in_table(const struct rt_env_var *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, t[i].name) == 0)
            return true;
    return false;
}

bool rt_env_known(const char *name)
{
    if (strncmp(name, TEST_PREFIX, strlen(TEST_PREFIX)) == 0)
        return true;
    for (size_t i = 0; i < rt_knob_count; i++)
        if (strcmp(name, rt_knob_table[i].name) == 0)
            return true;
    return in_table(rt_env_arrun_vars, rt_env_arrun_count, name) ||
           in_table(rt_env_other_vars, rt_env_other_count, name);
}

/* Edit distance, for "did you mean": knob names are short, so O(n*m) is nothing. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return (size_t)-1;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *rt_env_suggest(const char *name)
{
    const char *best = NULL;
    size_t best_d = 4;
    size_t n = rt_knob_count + rt_env_arrun_count + rt_env_other_count;
    for (size_t i = 0; i < n; i++) {
        const char *cand = i < rt_knob_count ? rt_knob_table[i].name
                           : i < rt_knob_count + rt_env_arrun_count
                               ? rt_env_arrun_vars[i - rt_knob_count].name
                               : rt_env_other_vars[i - rt_knob_count - rt_env_arrun_count].name;
        size_t d = distance(name, cand);
        if (d < best_d) {
            best_d = d;
            best = cand;
        }
    }
    return best;
}

size_t rt_env_unknown_each(void (*fn)(const char *name, void *arg), void *arg)
{
    size_t count = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "ARCOMM_", 7) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        char name[128];
        /* Longer than any known name: unknown, shown cut. */
        if (len >= sizeof(name))
            len = sizeof(name) - 1;
        memcpy(name, *e, len);
        name[len] = '\0';
        if (rt_env_known(name))
            continue;
        count++;
        fn(name, arg);
    }
    return count;
}

static void warn_one(const char *name, void *arg)
{
    const struct comm *c = arg;
    const char *s = rt_env_suggest(name);
    /* The name comes from the environment: keep the line one line. */
    char clean[128];
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < sizeof(clean); i++)
        clean[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    clean[i] = '\0';
    if (s != NULL)
        rt_log(c, RT_LOG_WARN, "%s is set but is no arcomm variable (did you mean %s?)", clean, s);
    else
        rt_log(c, RT_LOG_WARN, "%s is set but is no arcomm variable (arinfo --config lists them)",
               clean);
}

void rt_env_warn_unknown_once(const struct comm *c)
{
    static atomic_bool done;
    if (atomic_exchange(&done, true))
        return;
    rt_env_unknown_each(warn_one, (void *)c);
}
