/* SPDX-License-Identifier: MIT */
/*
 * What the MPI tests share: every rank's inputs made from (case, rank, index) alone,
 * so any rank can compute the float64 reference of a collective without
 * communicating; checks that report the first wrong element; /dev/shm bookkeeping.
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

/* The /dev/shm/arcomm-* entries now (count, names into names[max]). */
int mc_shm_list(char names[][96], int max);
/* Entries not in before that stay for half a second: what the test left behind. */
int mc_shm_left(char before[][96], int nbefore);
/* The end of a test program: every rank's failure count summed, rank 0 checks for
 * /dev/shm entries left behind and prints "ok"/"FAIL", then MPI_Finalize.  Returns
 * the exit status (0 when nothing failed anywhere). */
int mc_finish(int failed, char before[][96], int nbefore);

#endif /* ARCOMM_TEST_MPI_CHECK_H */
