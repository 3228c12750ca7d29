/* SPDX-License-Identifier: MIT */
/*
 * What the files of test_arrun share beyond the harness (arrun_run.h): the tests main
 * (test_arrun.c) runs from test_arrun_binding.c, test_arrun_streams.c and
 * test_arrun_habits.c, and ta_rank_var,
 * which reads the helper's `vars` lines for the binding tests and test_env_x.
 */
#ifndef ARCOMM_TEST_ARRUN_H
#define ARCOMM_TEST_ARRUN_H

#include <stddef.h>

/* test_arrun_binding.c */
void ta_rank_var(const char *out, int rank, const char *name, char *buf, size_t cap);
void test_bind(void **state);
void test_cpus_per_rank(void **state);
void test_report_bindings(void **state);
void test_bind_inherited(void **state);
void test_bind_cgroup(void **state);
int ta_remove_cgroup(void **state);

/* test_arrun_habits.c */
void test_mpirun_spellings(void **state);
void test_usr_signals_passed_on(void **state);
void test_job_control(void **state);
void test_closed_stdin(void **state);
void test_many_labelled_ranks(void **state);

/* test_arrun_streams.c */
void test_stdin(void **state);
void test_label(void **state);
void test_output_filename(void **state);
int ta_remove_output_top(void **state);

#endif
