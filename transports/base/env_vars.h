/* SPDX-License-Identifier: MIT */
/*
 * The ARCOMM_* variables that are not knobs, and the check of the environment for
 * names that are neither (a misspelt knob is otherwise silently ignored).  One
 * implementation for comm_init, which warns once per process, and for arinfo, which
 * lists what it finds.
 */
#ifndef ARCOMM_BASE_ENV_VARS_H
#define ARCOMM_BASE_ENV_VARS_H

#include "knobs.h"

#include <stdbool.h>
#include <stddef.h>

/* A variable of arcomm's other components, read outside the knob table (each by its own
 * component, at its own start). */
struct rt_env_var {
    const char *name;      /* ARCOMM_... */
    const char *component; /* who reads it: "arrun", "libarcomm_pmpi", "python", ... */
    const char *def;       /* its default, in words */
    const char *doc;       /* one line */
};

/* Set by arrun for its ranks and read by comm_init_env. */
extern const struct rt_env_var rt_env_arrun_vars[];
extern const size_t rt_env_arrun_count;
/* Read by libarcomm_pmpi, libarcomm_heap and the Python package. */
extern const struct rt_env_var rt_env_other_vars[];
extern const size_t rt_env_other_count;

/* Is name (no "=value") a knob, a variable of the tables above, or one of the test
 * suite's ARCOMM_TEST_* switches? */
bool rt_env_known(const char *name);

/* The knob or arrun variable closest to name within three edits, or NULL. */
const char *rt_env_suggest(const char *name);

/*
 * Calls fn once for each ARCOMM_* variable of the environment that rt_env_known does not
 * know, with its name (no "=value"; valid during the call only).  Returns how many.
 */
size_t rt_env_unknown_each(void (*fn)(const char *name, void *arg), void *arg);

struct comm;
/*
 * comm_init's check: the first communicator of the process (any thread) logs, at warn
 * level on its own log, one line per unknown ARCOMM_* variable with rt_env_suggest's
 * name; later ones log nothing.
 */
void rt_env_warn_unknown_once(const struct comm *c);

#endif /* ARCOMM_BASE_ENV_VARS_H */
