/* SPDX-License-Identifier: MIT */
/*
 * Which MPI datatypes and ops arcomm serves (the tables of docs/pmpi.md), and how the
 * bytes of a data-movement call are laid out.
 *
 * Reductions take the predefined integer and floating types whose C type arcomm has:
 * MPI requires the same datatype and op on every rank for a predefined op, and Open MPI
 * refuses a predefined op on any derived type (MPI_ERR_OP, MPI_Type_dup(MPI_INT) too), so
 * every rank of a correct program decides alike and a derived type goes to MPI for its
 * error.  Data movement (MPI_Bcast, MPI_Allgather, MPI_Alltoall) takes every datatype:
 * MPI matches type signatures, not handles (2 x MPI_2INT at the root, 4 x MPI_INT
 * elsewhere), so these calls move the signature's bytes.  A type whose bytes lie in one
 * run in type map order is read and written in place; any other is packed into a
 * scratch buffer with MPI_Pack and unpacked with MPI_Unpack (on one host MPI_Pack writes
 * exactly the type map's bytes, in order), so that the decision to serve never depends
 * on the handle.
 */
#include "pmpi.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct pmpi_type_map {
    MPI_Datatype type;
    comm_dtype_t dtype;
    size_t c_size; /* sizeof the C type the MPI type names */
};

/* The predefined types reductions take, most used first (the lookup is a scan). */
static const struct pmpi_type_map reduce_types[] = {
    {MPI_FLOAT, COMM_F32, sizeof(float)},
    {MPI_DOUBLE, COMM_F64, sizeof(double)},
    {MPI_INT, COMM_I32, sizeof(int)},
    {MPI_LONG, COMM_I64, sizeof(long)},
    {MPI_LONG_LONG, COMM_I64, sizeof(long long)},
    {MPI_INT32_T, COMM_I32, 4},
    {MPI_INT64_T, COMM_I64, 8},
    {MPI_UNSIGNED, COMM_U32, sizeof(unsigned)},
    {MPI_UNSIGNED_LONG, COMM_U64, sizeof(unsigned long)},
    {MPI_UNSIGNED_LONG_LONG, COMM_U64, sizeof(unsigned long long)},
    {MPI_UINT32_T, COMM_U32, 4},
    {MPI_UINT64_T, COMM_U64, 8},
    {MPI_INT8_T, COMM_I8, 1},
    {MPI_SIGNED_CHAR, COMM_I8, 1},
    {MPI_UINT8_T, COMM_U8, 1},
    {MPI_UNSIGNED_CHAR, COMM_U8, 1},
    {MPI_AINT, COMM_I64, sizeof(MPI_Aint)},
    {MPI_OFFSET, COMM_I64, sizeof(MPI_Offset)},
    {MPI_COUNT, COMM_I64, sizeof(MPI_Count)},
};
#define N_REDUCE_TYPES (sizeof(reduce_types) / sizeof(reduce_types[0]))

bool pmpi_reduce_dtype(MPI_Datatype type, comm_dtype_t *dtype)
{
    for (size_t i = 0; i < N_REDUCE_TYPES; i++) {
        if (reduce_types[i].type != type)
            continue;
        /* A C type whose width is not arcomm's (a 32-bit long) is not taken. */
        if (reduce_types[i].c_size != comm_dtype_size(reduce_types[i].dtype))
            return false;
        *dtype = reduce_types[i].dtype;
        return true;
    }
    return false;
}

bool pmpi_op(MPI_Op op, comm_op_t *cop)
{
    if (op == MPI_SUM)
        *cop = COMM_SUM;
    else if (op == MPI_MAX)
        *cop = COMM_MAX;
    else if (op == MPI_MIN)
        *cop = COMM_MIN;
    else if (op == MPI_PROD)
        *cop = COMM_PROD;
    else
        return false;
    return true;
}

/*
 * Whether a derived type's bytes lie in one run is worked out once (walking its
 * constructors through MPI_Type_get_contents) and cached on the type as an attribute:
 * 1 + the answer.  MPI deletes it with the type, so a handle that MPI reuses for another
 * type never sees a stale answer; MPI_Type_dup copies it (the same type map).
 */
static pthread_once_t keyval_once = PTHREAD_ONCE_INIT;
static int dense_keyval = MPI_KEYVAL_INVALID;

static void dense_keyval_create(void)
{
    if (PMPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &dense_keyval, NULL) !=
        MPI_SUCCESS)
        dense_keyval = MPI_KEYVAL_INVALID;
}

void pmpi_types_finalize(void)
{
    if (dense_keyval != MPI_KEYVAL_INVALID)
        PMPI_Type_free_keyval(&dense_keyval);
}

/* Constructors nest; a type map deeper than this is packed rather than walked. */
#define WALK_DEPTH_MAX 32

static bool walk(MPI_Datatype type, MPI_Aint base, MPI_Aint *next, int depth);

/* n elements of old from base: the first walked, the others must follow it without a
 * gap (old's extent is its size), each one's run right after the previous one's. */
static bool walk_run(MPI_Datatype old, MPI_Aint n, MPI_Aint base, MPI_Aint *next, int depth)
{
    MPI_Count size;
    MPI_Count lb, extent;
    if (n <= 0)
        return true;
    if (PMPI_Type_size_x(old, &size) != MPI_SUCCESS || size == MPI_UNDEFINED ||
        PMPI_Type_get_extent_x(old, &lb, &extent) != MPI_SUCCESS)
        return false;
    if (size == 0)
        return true;
    if (!walk(old, base, next, depth + 1))
        return false;
    if (n == 1)
        return true;
    if (extent != size || n > (PTRDIFF_MAX - *next) / size)
        return false;
    *next += (MPI_Aint)((n - 1) * size);
    return true;
}

/* Frees the datatypes MPI_Type_get_contents returned (the derived ones are copies). */
static void free_contents(MPI_Datatype *types, int n)
{
    for (int i = 0; i < n; i++) {
        int ni, na, nd, comb;
        if (PMPI_Type_get_envelope(types[i], &ni, &na, &nd, &comb) == MPI_SUCCESS &&
            comb != MPI_COMBINER_NAMED)
            PMPI_Type_free(&types[i]);
    }
}

/* The blocks of an indexed constructor of types[0], in the order of the type map: each
 * must continue the run.  Block k has bls[k] elements (bls NULL: bl_one each) at
 * idisps[k] extents of types[0] (INDEXED) or adisps[k] bytes (HINDEXED) from base. */
static bool walk_blocks(int count, const int *bls, int bl_one, const int *idisps,
                        const MPI_Aint *adisps, const MPI_Datatype *types, MPI_Aint base,
                        MPI_Aint *next, int depth)
{
    MPI_Count lb, extent = 1;
    if (idisps != NULL && PMPI_Type_get_extent_x(types[0], &lb, &extent) != MPI_SUCCESS)
        return false;
    for (int k = 0; k < count; k++) {
        MPI_Aint disp = idisps != NULL ? (MPI_Aint)idisps[k] * (MPI_Aint)extent : adisps[k];
        if (!walk_run(types[0], bls != NULL ? bls[k] : bl_one, base + disp, next, depth))
            return false;
    }
    return true;
}

static bool walk_contents(int comb, const int *ints, const MPI_Aint *aints,
                          const MPI_Datatype *types, MPI_Aint base, MPI_Aint *next, int depth)
{
    MPI_Count lb, extent;
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED: /* lb and extent place the next element, not this one's bytes */
        return walk(types[0], base, next, depth + 1);
    case MPI_COMBINER_CONTIGUOUS:
        return walk_run(types[0], ints[0], base, next, depth);
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR:
        if (PMPI_Type_get_extent_x(types[0], &lb, &extent) != MPI_SUCCESS)
            return false;
        /* Blocks that touch (stride == blocklength) are one run of count * blocklength. */
        if (ints[0] <= 1 || ints[1] == 0 ||
            (comb == MPI_COMBINER_VECTOR ? ints[2] == ints[1]
                                         : aints[0] == (MPI_Aint)ints[1] * (MPI_Aint)extent))
            return walk_run(types[0], (MPI_Aint)ints[0] * ints[1], base, next, depth);
        return false;
    case MPI_COMBINER_INDEXED:
        return walk_blocks(ints[0], ints + 1, 0, ints + 1 + ints[0], NULL, types, base, next,
                           depth);
    case MPI_COMBINER_INDEXED_BLOCK:
        return walk_blocks(ints[0], NULL, ints[1], ints + 2, NULL, types, base, next, depth);
    case MPI_COMBINER_HINDEXED:
        return walk_blocks(ints[0], ints + 1, 0, NULL, aints, types, base, next, depth);
    case MPI_COMBINER_HINDEXED_BLOCK:
        return walk_blocks(ints[0], NULL, ints[1], NULL, aints, types, base, next, depth);
    case MPI_COMBINER_STRUCT:
        for (int k = 0; k < ints[0]; k++)
            if (!walk_run(types[k], ints[1 + k], base + aints[k], next, depth))
                return false;
        return true;
    default: /* subarrays, distributed arrays, Fortran types: packed */
        return false;
    }
}

/* type placed at base: its bytes, in type map order, continue the run that ends at
 * *next (which advances past them). */
static bool walk(MPI_Datatype type, MPI_Aint base, MPI_Aint *next, int depth)
{
    int ni, na, nd, comb;
    if (depth > WALK_DEPTH_MAX || PMPI_Type_get_envelope(type, &ni, &na, &nd, &comb) != MPI_SUCCESS)
        return false;
    if (comb == MPI_COMBINER_NAMED) {
        MPI_Count size, tlb, textent;
        if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS ||
            PMPI_Type_get_true_extent_x(type, &tlb, &textent) != MPI_SUCCESS)
            return false;
        if (size == 0)
            return true;
        /* A predefined type with a gap (MPI_DOUBLE_INT) is no run. */
        if (textent != size || base + (MPI_Aint)tlb != *next)
            return false;
        *next += (MPI_Aint)size;
        return true;
    }
    int *ints = malloc(((size_t)ni + 1) * sizeof(*ints));
    MPI_Aint *aints = malloc(((size_t)na + 1) * sizeof(*aints));
    MPI_Datatype *types = malloc(((size_t)nd + 1) * sizeof(*types));
    bool ok = false;
    if (ints != NULL && aints != NULL && types != NULL &&
        PMPI_Type_get_contents(type, ni, na, nd, ints, aints, types) == MPI_SUCCESS) {
        ok = walk_contents(comb, ints, aints, types, base, next, depth);
        free_contents(types, nd);
    }
    free(ints);
    free(aints);
    free(types);
    return ok;
}

/* Whether a derived type's bytes are one run in type map order (cached on the type). */
static bool derived_dense(MPI_Datatype type, MPI_Aint tlb, MPI_Count size)
{
    pthread_once(&keyval_once, dense_keyval_create);
    void *value = NULL;
    int found = 0;
    if (dense_keyval != MPI_KEYVAL_INVALID &&
        PMPI_Type_get_attr(type, dense_keyval, &value, &found) == MPI_SUCCESS && found)
        return (intptr_t)value == 2;
    MPI_Aint next = tlb;
    bool dense = walk(type, 0, &next, 0) && next == tlb + (MPI_Aint)size;
    if (dense_keyval != MPI_KEYVAL_INVALID)
        PMPI_Type_set_attr(type, dense_keyval, (void *)(intptr_t)(dense ? 2 : 1));
    return dense;
}

bool pmpi_layout(MPI_Datatype type, struct pmpi_layout *l)
{
    comm_dtype_t dt;
    if (pmpi_reduce_dtype(type, &dt)) {
        size_t size = comm_dtype_size(dt);
        *l = (struct pmpi_layout){.size = size, .extent = (MPI_Aint)size, .tlb = 0, .dense = true};
        return true;
    }
    int ni, na, nd, comb;
    MPI_Count size, lb, extent, tlb, textent;
    if (type == MPI_DATATYPE_NULL ||
        PMPI_Type_get_envelope(type, &ni, &na, &nd, &comb) != MPI_SUCCESS ||
        PMPI_Type_size_x(type, &size) != MPI_SUCCESS || size == MPI_UNDEFINED || size < 0 ||
        PMPI_Type_get_extent_x(type, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent_x(type, &tlb, &textent) != MPI_SUCCESS)
        return false;
    l->size = (size_t)size;
    l->extent = (MPI_Aint)extent;
    l->tlb = (MPI_Aint)tlb;
    if (size == 0 || textent != size)
        l->dense = size == 0;
    else
        l->dense = comb == MPI_COMBINER_NAMED || derived_dense(type, (MPI_Aint)tlb, size);
    return true;
}

bool pmpi_layout_bytes(const struct pmpi_layout *l, int count, size_t *bytes)
{
    if (count < 0 || (l->size != 0 && (size_t)count > SIZE_MAX / l->size))
        return false;
    *bytes = (size_t)count * l->size;
    return true;
}

/* Packing and unpacking go through MPI_Pack's int sizes: at most INT_MAX bytes and
 * elements a call, so count elements are done in pieces.  On MPI_COMM_SELF: on one host
 * the format does not depend on the communicator, and the call's may be freed meanwhile
 * by another thread (an erroneous program). */
static size_t piece(const struct pmpi_layout *l, size_t left)
{
    size_t most = l->size > 0 ? (size_t)INT_MAX / l->size : (size_t)INT_MAX;
    return left < most ? left : most;
}

int pmpi_pack(const void *buf, size_t count, MPI_Datatype type, const struct pmpi_layout *l,
              void *out)
{
    if (l->size > (size_t)INT_MAX)
        return MPI_ERR_TYPE;
    for (size_t done = 0; done < count;) {
        size_t n = piece(l, count - done);
        int pos = 0;
        int rc = PMPI_Pack((const char *)buf + (MPI_Aint)done * l->extent, (int)n, type,
                           (char *)out + done * l->size, (int)(n * l->size), &pos, MPI_COMM_SELF);
        if (rc != MPI_SUCCESS)
            return rc;
        done += n;
    }
    return MPI_SUCCESS;
}

int pmpi_unpack(const void *in, size_t count, MPI_Datatype type, const struct pmpi_layout *l,
                void *buf)
{
    if (l->size > (size_t)INT_MAX)
        return MPI_ERR_TYPE;
    for (size_t done = 0; done < count;) {
        size_t n = piece(l, count - done);
        int pos = 0;
        int rc = PMPI_Unpack((const char *)in + done * l->size, (int)(n * l->size), &pos,
                             (char *)buf + (MPI_Aint)done * l->extent, (int)n, type, MPI_COMM_SELF);
        if (rc != MPI_SUCCESS)
            return rc;
        done += n;
    }
    return MPI_SUCCESS;
}
