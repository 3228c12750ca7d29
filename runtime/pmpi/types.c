/* SPDX-License-Identifier: MIT */
/*
 * Which MPI datatypes and ops arcomm serves (the table of docs/pmpi.md).  Reductions take
 * the predefined integer and floating types whose C type arcomm has; data movement takes
 * those and the bytes of any other predefined type without gaps (MPI_CHAR, MPI_BYTE,
 * MPI_SHORT, MPI_C_BOOL, ...).  Everything else (derived types, pair types such as
 * MPI_DOUBLE_INT with a gap, MPI_MAXLOC, user ops) is handed to PMPI.
 */
#include "pmpi.h"

#include <limits.h>

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

bool pmpi_reduce_dtype(MPI_Datatype type, comm_dtype_t *dtype)
{
    for (size_t i = 0; i < sizeof(reduce_types) / sizeof(reduce_types[0]); i++) {
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

bool pmpi_move_dtype(MPI_Datatype type, int count, comm_dtype_t *dtype, size_t *ecount)
{
    if (count < 0)
        return false;
    if (pmpi_reduce_dtype(type, dtype)) {
        *ecount = (size_t)count;
        return true;
    }
    if (type == MPI_DATATYPE_NULL)
        return false;
    /* Any other predefined type moves as its bytes when it has no gap and starts at 0. */
    int ni, na, nd, combiner, size;
    MPI_Aint lb, extent, tlb, textent;
    if (PMPI_Type_get_envelope(type, &ni, &na, &nd, &combiner) != MPI_SUCCESS ||
        combiner != MPI_COMBINER_NAMED)
        return false;
    if (PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0 ||
        PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(type, &tlb, &textent) != MPI_SUCCESS)
        return false;
    if (lb != 0 || tlb != 0 || extent != size || textent != size)
        return false;
    *dtype = COMM_U8;
    *ecount = (size_t)count * (size_t)size;
    return true;
}
