/* SPDX-License-Identifier: MIT */
/*
 * MPI matches the type signatures of a data-movement call, not the datatype handles: a
 * root may broadcast 2 x MPI_2INT to ranks that receive 4 x MPI_INT.  Here every rank
 * of MPI_Bcast, MPI_Allgather and MPI_Alltoall describes the same signature with a
 * datatype of its own (rank r takes form r + call), out of forms whose bytes are one run
 * (MPI_INT, MPI_2INT, a contiguous type, a dup, an indexed type with touching blocks, a
 * resized struct, an hindexed type reaching below its buffer pointer) and forms whose
 * bytes are not (a strided vector, an hvector, a struct whose blocks are out of memory
 * order, a resized type with gaps between elements, a subarray, MPI_DOUBLE_INT's padding,
 * absolute addresses at MPI_BOTTOM), out of place and in place, at two sizes.  Every byte
 * of every element is checked, and every byte between them must keep its poison.  Every
 * call must be served by arcomm (run_pmpi.sh compares the library's report).
 */
#include "pmpi_test.h"

#include <stdlib.h>

#define POISON  0xA5
#define MAXITEM 64 /* items (signature entries) of one element, at most */
#define PAD     256

/* A datatype describing a signature of items: count elements, each with n items at
 * off[i] (bytes from the element's start, which is buffer + e * extent) of size[i]. */
struct form {
    const char *name;
    MPI_Datatype type; /* MPI_DATATYPE_NULL: made per buffer (absolute addresses) */
    int n;
    int off[MAXITEM];
    int size[MAXITEM];
    MPI_Aint extent;
    bool bottom; /* absolute addresses: the call's buffer is MPI_BOTTOM */
};

/* Signature "int x 12" per unit, in eleven forms; "(double, int) x 4" in three. */
static struct form ints[12], dis[3];
static int n_ints, n_dis;

static struct form *add(struct form *forms, int *n, const char *name, MPI_Datatype t, int items,
                        const int *off, int size)
{
    struct form *f = &forms[(*n)++];
    f->name = name;
    f->n = items;
    for (int i = 0; i < items; i++) {
        f->off[i] = off[i];
        f->size[i] = size;
    }
    if (t != MPI_DATATYPE_NULL) {
        MPI_Type_commit(&t);
        MPI_Aint lb;
        MPI_Type_get_extent(t, &lb, &f->extent);
    }
    f->type = t;
    return f;
}

static void make_forms(void)
{
    MPI_Datatype t, u;
    int off[MAXITEM];
    for (int i = 0; i < 12; i++)
        off[i] = 4 * i;
    add(ints, &n_ints, "MPI_INT", MPI_INT, 1, off, 4);
    add(ints, &n_ints, "MPI_2INT", MPI_2INT, 2, off, 4);
    MPI_Type_contiguous(4, MPI_INT, &t);
    add(ints, &n_ints, "contiguous(4, MPI_INT)", t, 4, off, 4);
    MPI_Type_dup(MPI_INT, &t);
    add(ints, &n_ints, "dup(MPI_INT)", t, 1, off, 4);
    int bl[2] = {2, 10}, ds[2] = {0, 2};
    MPI_Type_indexed(2, bl, ds, MPI_INT, &t);
    add(ints, &n_ints, "indexed, touching blocks", t, 12, off, 4);
    /* Below the buffer pointer: 6 ints at -24, 6 at 0 (one run from -24). */
    int hbl[2] = {6, 6};
    MPI_Aint hds[2] = {-24, 0};
    MPI_Type_create_hindexed(2, hbl, hds, MPI_INT, &t);
    int neg[12];
    for (int i = 0; i < 12; i++)
        neg[i] = -24 + 4 * i;
    add(ints, &n_ints, "hindexed from -24", t, 12, neg, 4);
    /* Strided: every other int. */
    MPI_Type_vector(12, 1, 2, MPI_INT, &t);
    for (int i = 0; i < 12; i++)
        off[i] = 8 * i;
    add(ints, &n_ints, "vector(12, 1, 2)", t, 12, off, 4);
    /* Blocks of 4 ints 20 bytes apart. */
    MPI_Type_create_hvector(3, 4, 20, MPI_INT, &t);
    for (int i = 0; i < 12; i++)
        off[i] = 20 * (i / 4) + 4 * (i % 4);
    add(ints, &n_ints, "hvector(3, 4, 20 B)", t, 12, off, 4);
    /* Type map order is not memory order: 3 ints at 12, then 3 at 0. */
    int sbl[2] = {3, 3};
    MPI_Aint sds[2] = {12, 0};
    MPI_Datatype sts[2] = {MPI_INT, MPI_INT};
    MPI_Type_create_struct(2, sbl, sds, sts, &t);
    int rev[6] = {12, 16, 20, 0, 4, 8};
    add(ints, &n_ints, "struct, blocks out of order", t, 6, rev, 4);
    /* 3 ints in 16 bytes: a gap after each element. */
    MPI_Type_contiguous(3, MPI_INT, &u);
    MPI_Type_create_resized(u, 0, 16, &t);
    MPI_Type_free(&u);
    for (int i = 0; i < 3; i++)
        off[i] = 4 * i;
    add(ints, &n_ints, "resized(3 ints, 16 B)", t, 3, off, 4);
    /* Columns 2..4 of a 4 x 6 array of ints. */
    int sizes[2] = {4, 6}, sub[2] = {4, 3}, starts[2] = {0, 2};
    MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, MPI_INT, &t);
    for (int i = 0; i < 12; i++)
        off[i] = 4 * ((i / 3) * 6 + 2 + i % 3);
    add(ints, &n_ints, "subarray 4x3 of 4x6", t, 12, off, 4);
    /* Absolute addresses (MPI_BOTTOM), strided as the vector: made per buffer. */
    for (int i = 0; i < 12; i++)
        off[i] = 8 * i;
    struct form *f = add(ints, &n_ints, "hindexed at MPI_BOTTOM", MPI_DATATYPE_NULL, 12, off, 4);
    f->bottom = true;
    f->extent = 96;

    /* (double, int): MPI_DOUBLE_INT has 4 bytes of padding; a struct resized to 12 bytes
     * has none; a contiguous type of 4 pairs. */
    int doff[2] = {0, 8};
    f = add(dis, &n_dis, "MPI_DOUBLE_INT", MPI_DOUBLE_INT, 2, doff, 0);
    f->size[0] = 8, f->size[1] = 4;
    int pbl[2] = {1, 1};
    MPI_Aint pds[2] = {0, 8};
    MPI_Datatype pts[2] = {MPI_DOUBLE, MPI_INT};
    MPI_Type_create_struct(2, pbl, pds, pts, &u);
    MPI_Type_create_resized(u, 0, 12, &t);
    MPI_Type_free(&u);
    f = add(dis, &n_dis, "struct(double, int) in 12 B", t, 2, doff, 0);
    f->size[0] = 8, f->size[1] = 4;
    MPI_Type_contiguous(4, MPI_DOUBLE_INT, &t);
    int qoff[8];
    for (int i = 0; i < 8; i++)
        qoff[i] = 16 * (i / 2) + 8 * (i % 2);
    f = add(dis, &n_dis, "contiguous(4, MPI_DOUBLE_INT)", t, 8, qoff, 0);
    for (int i = 0; i < 8; i++)
        f->size[i] = i % 2 ? 4 : 8;
}

/* How many elements of form f carry items signature items. */
static int elements(const struct form *f, int items)
{
    return items / f->n;
}

/* A buffer for elems elements of f: the call's pointer is at + PAD (room below it). */
struct buf {
    char *mem;
    size_t len;
    char *at;
    MPI_Datatype type; /* f's, or the absolute one made for this buffer */
};

static void buf_make(struct buf *b, const struct form *f, int elems)
{
    b->len = (size_t)elems * (size_t)f->extent + 2 * PAD;
    b->mem = malloc(b->len);
    memset(b->mem, POISON, b->len);
    b->at = b->mem + PAD;
    b->type = f->type;
    if (f->bottom) {
        MPI_Aint disp[MAXITEM];
        int one[MAXITEM];
        for (int i = 0; i < f->n; i++) {
            MPI_Get_address(b->at + f->off[i], &disp[i]);
            one[i] = 1;
        }
        MPI_Datatype t;
        MPI_Type_create_hindexed(f->n, one, disp, MPI_INT, &t);
        MPI_Type_create_resized(t, disp[0], f->extent, &b->type);
        MPI_Type_free(&t);
        MPI_Type_commit(&b->type);
    }
}

static void *buf_arg(const struct buf *b, const struct form *f)
{
    return f->bottom ? MPI_BOTTOM : b->at;
}

static void buf_free(struct buf *b, const struct form *f)
{
    if (f->bottom)
        MPI_Type_free(&b->type);
    free(b->mem);
}

/* Item k of the signature (from element 0) in b: its address and size. */
static char *item(const struct buf *b, const struct form *f, int k, int *size)
{
    *size = f->size[k % f->n];
    return b->at + (MPI_Aint)(k / f->n) * f->extent + f->off[k % f->n];
}

/* The bytes of item k of the data rank r sends as block blk in test t. */
static void item_bytes(uint64_t t, int r, int blk, int k, int size, unsigned char *out)
{
    uint64_t s = t_seed(t * 7919u + (uint64_t)blk * 131u + (uint64_t)k, r);
    for (int i = 0; i < size; i++)
        out[i] = (unsigned char)(t_next(&s) >> 56);
}

/* Writes block blk (items items from item first) of rank r's data into b. */
static void put_block(const struct buf *b, const struct form *f, int first, int items, uint64_t t,
                      int r, int blk)
{
    for (int k = 0; k < items; k++) {
        int size;
        char *p = item(b, f, first + k, &size);
        item_bytes(t, r, blk, k, size, (unsigned char *)p);
    }
}

/* Checks block blk of rank r's data at items first.. of b; counts the items checked. */
static int check_block(const struct buf *b, const struct form *f, int first, int items, uint64_t t,
                       int r, int blk, const char *what)
{
    for (int k = 0; k < items; k++) {
        int size;
        unsigned char want[16];
        const char *p = item(b, f, first + k, &size);
        item_bytes(t, r, blk, k, size, want);
        if (memcmp(p, want, (size_t)size) != 0) {
            CHECK(0, "%s %s: item %d of block %d (rank %d's) is wrong", what, f->name, k, blk, r);
            return 0;
        }
    }
    return items;
}

/* Every byte of b that is no item of its elems elements must still be poison. */
static void check_gaps(const struct buf *b, const struct form *f, int elems, const char *what)
{
    char *mask = calloc(b->len, 1);
    for (int k = 0; k < elems * f->n; k++) {
        int size;
        char *p = item(b, f, k, &size);
        memset(mask + (p - b->mem), 1, (size_t)size);
    }
    for (size_t i = 0; i < b->len; i++) {
        if (!mask[i] && (unsigned char)b->mem[i] != POISON) {
            CHECK(0, "%s %s: byte %td outside the type map was written", what, f->name,
                  (ptrdiff_t)i - PAD);
            break;
        }
    }
    free(mask);
}

static uint64_t test_id = 1;

/* One broadcast, allgather and alltoall of units x the group's signature (items items
 * per unit), every rank with its own form. */
static void run_group(struct form *forms, int nforms, int items, int units, int variant)
{
    int sig = items * units; /* items of one block */
    struct form *mine = &forms[(t_rank + variant) % nforms];
    struct form *other = &forms[(t_rank + variant + 1) % nforms];
    int k_mine = elements(mine, sig), k_other = elements(other, sig);
    char what[96];

    /* MPI_Bcast from every root. */
    for (int root = 0; root < t_size; root++, test_id++) {
        struct buf b;
        buf_make(&b, mine, k_mine);
        if (t_rank == root)
            put_block(&b, mine, 0, sig, test_id, root, 0);
        int rc = MPI_Bcast(buf_arg(&b, mine), k_mine, b.type, root, MPI_COMM_WORLD);
        SERVED(T_BCAST);
        snprintf(what, sizeof(what), "MPI_Bcast root %d, %d items", root, sig);
        CHECK(rc == MPI_SUCCESS, "%s: %d", what, rc);
        check_block(&b, mine, 0, sig, test_id, root, 0, what);
        check_gaps(&b, mine, k_mine, what);
        buf_free(&b, mine);
    }

    /* MPI_Allgather: send with one form, receive with another, then in place. */
    for (int in_place = 0; in_place < 2; in_place++, test_id++) {
        struct buf s, r;
        buf_make(&s, mine, k_mine);
        buf_make(&r, other, k_other * t_size);
        put_block(&s, mine, 0, sig, test_id, t_rank, 0);
        if (in_place)
            put_block(&r, other, t_rank * sig, sig, test_id, t_rank, 0);
        int rc = MPI_Allgather(in_place ? MPI_IN_PLACE : buf_arg(&s, mine), k_mine, s.type,
                               buf_arg(&r, other), k_other, r.type, MPI_COMM_WORLD);
        SERVED(T_ALLGATHER);
        snprintf(what, sizeof(what), "MPI_Allgather%s from %s, %d items",
                 in_place ? " in place" : "", mine->name, sig);
        CHECK(rc == MPI_SUCCESS, "%s: %d", what, rc);
        for (int p = 0; p < t_size; p++)
            check_block(&r, other, p * sig, sig, test_id, p, 0, what);
        check_gaps(&r, other, k_other * t_size, what);
        buf_free(&s, mine);
        buf_free(&r, other);
    }

    /* MPI_Alltoall: block p of this rank's data goes to rank p. */
    for (int in_place = 0; in_place < 2; in_place++, test_id++) {
        struct buf s, r;
        buf_make(&s, mine, k_mine * t_size);
        buf_make(&r, other, k_other * t_size);
        for (int p = 0; p < t_size; p++)
            put_block(in_place ? &r : &s, in_place ? other : mine, p * sig, sig, test_id, t_rank,
                      p);
        int rc = MPI_Alltoall(in_place ? MPI_IN_PLACE : buf_arg(&s, mine), k_mine, s.type,
                              buf_arg(&r, other), k_other, r.type, MPI_COMM_WORLD);
        SERVED(T_ALLTOALL);
        snprintf(what, sizeof(what), "MPI_Alltoall%s from %s, %d items",
                 in_place ? " in place" : "", mine->name, sig);
        CHECK(rc == MPI_SUCCESS, "%s: %d", what, rc);
        for (int p = 0; p < t_size; p++)
            check_block(&r, other, p * sig, sig, test_id, p, t_rank, what);
        check_gaps(&r, other, k_other * t_size, what);
        buf_free(&s, mine);
        buf_free(&r, other);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    PMPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &t_size);
    make_forms();
    /* One unit (48 bytes: eager broadcasts, flag paths) and 3000 (144 KiB: bulk paths). */
    static const int units[] = {1, 3000};
    for (int u = 0; u < 2; u++) {
        for (int v = 0; v < n_ints; v++)
            run_group(ints, n_ints, 12, units[u], v);
        for (int v = 0; v < n_dis; v++)
            run_group(dis, n_dis, 8, units[u], v);
    }
    int rc = t_finish();
    MPI_Finalize();
    return rc;
}
