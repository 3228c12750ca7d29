/* SPDX-License-Identifier: MIT */
/*
 * What the MPI tests share: every rank's inputs made from (case, rank, index) alone,
 * so any rank can compute the float64 reference of a collective without
 * communicating; checks that report the first wrong element; what the test left in /dev/shm.
 */
#ifndef ARCOMM_TEST_MPI_CHECK_H
#define ARCOMM_TEST_MPI_CHECK_H

#include <arcomm.h>
#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Rank r's element i of case seed, as a double that dtype holds exactly (op shapes the
 * range: PROD stays near 1, integers stay small enough not to overflow). */
double mc_value(uint64_t seed, int rank, size_t i, comm_dtype_t dtype, comm_op_t op);
/* Rank r's byte i of case seed, uniform over 0..255: 8-bit inputs whose sums and
 * products wrap (the reference: the same operation modulo 256). */
uint8_t mc_byte(uint64_t seed, int rank, size_t i);
/* Stores v (exactly representable) as element i of buf. */
void mc_store(void *buf, size_t i, comm_dtype_t dtype, double v);
double mc_load(const void *buf, size_t i, comm_dtype_t dtype);
/* Fills n elements of rank's input of case seed. */
void mc_fill(void *buf, size_t n, uint64_t seed, int rank, comm_dtype_t dtype, comm_op_t op,
             size_t first);
/* The reduction over nranks of element i (first + i of each rank's input). */
double mc_reduce_ref(uint64_t seed, int nranks, size_t i, comm_dtype_t dtype, comm_op_t op,
                     double *sumabs);
/* Does got match the reference within dtype's rounding? */
bool mc_close(double got, double ref, double sumabs, comm_dtype_t dtype, comm_op_t op);
/* FNV-1a of bytes: every rank's result compared bit for bit through MPI. */
uint64_t mc_hash(const void *buf, size_t bytes);
/* Do all ranks of MPI_COMM_WORLD hold the same hash? */
bool mc_same_everywhere(uint64_t h);
/* The first of out's n elements (index first + i of the case) that is off the reduction
 * of every rank's input, with why; false when all are right. */
bool mc_first_wrong(const void *out, size_t n, size_t first, uint64_t seed, int nranks,
                    comm_dtype_t dtype, comm_op_t op, char *why, size_t len);
/* The same for comm_allreduce_add: the sum plus addend[i % addend_count] (this rank's). */
bool mc_first_wrong_add(const void *out, const void *addend, size_t n, size_t addend_count,
                        uint64_t seed, int nranks, comm_dtype_t dtype, char *why, size_t len);
/* The same with the tolerance of an f32 sum that crossed as bf16 (a CUDA communicator's
 * allreduce from ARCOMM_BF16_THRESHOLD on): each input rounded to bf16 once. */
bool mc_first_wrong_bf16_wire(const void *out, size_t n, uint64_t seed, int nranks, char *why,
                              size_t len);
const char *mc_dtype_name(comm_dtype_t dtype);
/* Is every rank of MPI_COMM_WORLD on one host, as comm_init_mpi groups them (MPI's
 * shared-memory split, or ARCOMM_MPI_RANKS_PER_HOST covering every rank)? */
bool mc_one_host(void);

/* A communicator over MPI_COMM_WORLD by comm_init_mpi with this timeout; on failure
 * the message and MPI_Abort (the test cannot go on). */
comm_t *mc_world_comm(int timeout_ms);

/*
 * What the test left in /dev/shm, counting only what it made: every shm_open of an
 * "/arcomm-..." name by this process (the library's segments and failure records, made
 * or attached; mpi_check.c interposes shm_open) is recorded, and those names alone are
 * checked, so another arcomm job on the machine changes nothing.  mc_shm_begin also
 * puts a bystander name beside the test's (rank 0, by open(2), so not recorded): the
 * check must pass with it there, and the library must not remove it.
 */
void mc_shm_begin(void);
/* Removes the bystander now (async-signal-safe): for a watchdog that ends the test. */
void mc_shm_abandon(void);
/* After every rank destroyed its communicators (collective): this rank's recorded names
 * still in /dev/shm (given 6 s: a failure record stays while its reporter waits for late
 * ranks), and on rank 0 the bystander checked and removed.  Returns the number of
 * problems this rank saw, each printed. */
int mc_shm_end(void);
/* The end of a test program: every rank's failure count and mc_shm_end summed, rank 0
 * prints "ok"/"FAIL", then MPI_Finalize.  Returns the exit status (0 when nothing
 * failed anywhere). */
int mc_finish(int failed);

#endif /* ARCOMM_TEST_MPI_CHECK_H */
