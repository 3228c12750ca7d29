/* SPDX-License-Identifier: MIT */
/*
 * The cuda-p2p transport's host-side arithmetic and its selection, on the CPU (no GPU
 * needed): the control line and the device region's LL areas for 1 to 8 ranks, the
 * decision whether a communicator's GPUs reach each other (fake peer matrices, peer
 * access forced off for some or all pairs), what an unforced CUDA communicator takes
 * (the host-staged transport until cuda-p2p is verified on two GPUs), and the backends'
 * order in this build.
 */
#include "arcomm_build.h"
#include "backend.h"
#include "cuda/p2p_layout.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

extern const struct backend_ops *const rt_backends[];
extern const size_t rt_backend_count;
const struct backend_ops *rt_backend_pick(const struct transport_probe *p, const char *name,
                                          char *why, size_t len);

static void test_line(void **state)
{
    (void)state;
    assert_int_equal(sizeof(struct cuda_p2p_line), 3 * CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_p2p_line, busid), CUDA_LINE);
    assert_int_equal(offsetof(struct cuda_p2p_line, ipc), 2 * CUDA_LINE);
    assert_true(CUDA_P2P_CTRL_OFF >= sizeof(struct cuda_ctrl));
    assert_true(CUDA_P2P_CTRL_OFF + sizeof(struct cuda_p2p_line) <= CUDA_CTRL_BYTES);
    assert_int_equal(CUDA_P2P_CTRL_OFF % CUDA_LINE, 0);
}

/* Every (sub-slot, sender) area is disjoint from the others, 16-byte aligned, inside the
 * region, and a round's LL units (headers and payload) fit one area. */
static void test_areas(void **state)
{
    (void)state;
    const uint64_t ab = CUDA_P2P_AREA_BYTES;
    for (int n = 1; n <= CUDA_MAX_RANKS; n++) {
        struct cuda_p2p_geom g = cuda_p2p_geom_compute(n);
        uint64_t region = g.bytes;
        assert_int_equal(g.ll_area, ab);
        assert_true(g.off_rs >= (uint64_t)CUDA_KSLOTS * n * ab);
        for (uint32_t r1 = 0; r1 < 4; r1++) {
            for (int s1 = 0; s1 < n; s1++) {
                uint64_t o1 = cuda_p2p_ll_off(ab, n, r1, s1);
                assert_int_equal(o1 % 16, 0);
                assert_true(o1 + ab <= region);
                /* Rounds two apart share an area, neighbours never do. */
                assert_true(cuda_p2p_ll_off(ab, n, r1 + 2, s1) == o1);
                for (uint32_t r2 = 0; r2 < 2; r2++)
                    for (int s2 = 0; s2 < n; s2++)
                        if ((r1 % 2 != r2 || s1 != s2))
                            assert_true(cuda_p2p_ll_off(ab, n, r2, s2) != o1);
            }
        }
    }
    static const uint32_t wsizes[] = {1, 2, 4, 8};
    for (size_t w = 0; w < 4; w++) {
        struct cuda_kplan p = cuda_kplan_compute(1ull << 30, wsizes[w], ab);
        uint32_t units = cuda_ll_units(p.round_elems, wsizes[w]);
        assert_true(((uint64_t)CUDA_LL_PAYLOAD0 + units) * CUDA_LL_UNIT <= ab);
        /* Headers of every block come before the payload. */
        assert_true(cuda_ll_header(CUDA_MAX_BLOCKS - 1) < CUDA_LL_PAYLOAD0);
        assert_true(p.rounds * p.round_elems >= (1ull << 30));
    }
}

/* Two-shot: the areas and flag lines stay apart and inside the region. */
static void test_ts_areas(void **state)
{
    (void)state;
    for (int n = 1; n <= CUDA_MAX_RANKS; n++) {
        struct cuda_p2p_geom g = cuda_p2p_geom_compute(n);
        assert_int_equal(g.slice_bytes % CUDA_PAGE, 0);
        assert_true(g.slice_bytes >= (1u << 20));
        assert_true(g.off_ag >= g.off_rs + (uint64_t)CUDA_KSLOTS * n * g.slice_bytes);
        assert_true(g.off_flags >= g.off_ag + (uint64_t)CUDA_KSLOTS * n * g.slice_bytes);
        for (int kind = 0; kind < 2; kind++) {
            for (uint32_t r = 0; r < 2; r++) {
                for (int q = 0; q < n; q++) {
                    uint64_t o = cuda_p2p_ts_off(&g, n, kind, r, q);
                    assert_int_equal(o % 16, 0);
                    assert_true(o >= g.off_rs && o + g.slice_bytes <= g.off_flags);
                    assert_true(cuda_p2p_ts_off(&g, n, kind, r + 2, q) == o);
                    for (int k2 = 0; k2 < 2; k2++)
                        for (uint32_t r2 = 0; r2 < 2; r2++)
                            for (int q2 = 0; q2 < n; q2++) {
                                uint64_t o2 = cuda_p2p_ts_off(&g, n, k2, r2, q2);
                                if (k2 != kind || r2 != r || q2 != q)
                                    assert_true(o2 + g.slice_bytes <= o || o + g.slice_bytes <= o2);
                            }
                    uint64_t prev = 0;
                    for (uint32_t b = 0; b < CUDA_MAX_BLOCKS; b++) {
                        uint64_t f = cuda_p2p_flag_off(&g, n, kind, r, q, b);
                        assert_int_equal(f % CUDA_P2P_FLAG_LINE, 0);
                        assert_true(f >= g.off_flags && f + CUDA_P2P_FLAG_LINE <= g.bytes);
                        assert_true(b == 0 || f > prev);
                        prev = f;
                    }
                }
            }
        }
        /* The last flag line of all, and the first of another (sub-slot, kind, sender). */
        assert_true(cuda_p2p_flag_off(&g, n, 1, 1, n - 1, CUDA_MAX_BLOCKS - 1) +
                        CUDA_P2P_FLAG_LINE <=
                    g.bytes);
        assert_true(cuda_p2p_flag_off(&g, n, 0, 0, 1 % n, 0) !=
                        cuda_p2p_flag_off(&g, n, 0, 0, 0, 0) ||
                    n == 1);
    }
}

/* Two-shot's cuts at multiples of align elements (8: elements travel one by one; 64: a
 * block codec's blocks of block_bytes): rounds, slices and block portions, taken in
 * order, tile the message (each non-empty part starts where the previous ended, the last
 * ends at count: every element exactly once), every non-empty part starts at a multiple
 * of align of the whole message, and a slice fits its areas (encoded, for a block
 * codec). */
static void check_ts_plan(uint32_t align, uint32_t block_bytes)
{
    static const uint64_t counts[] = {
        1, 7, 8, 9, 63, 64, 65, 1000, 65536 + 3, 3u << 20, (9u << 20) + 5};
    static const uint32_t esizes[] = {1, 2, 4, 8};
    static const uint32_t blocks[] = {1, 7, CUDA_MAX_BLOCKS};
    for (int n = 1; n <= CUDA_MAX_RANKS; n += (n < 4 ? 1 : 4)) {
        struct cuda_p2p_geom g = cuda_p2p_geom_compute(n);
        for (size_t e = 0; e < 4; e++) {
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                for (size_t bi = 0; bi < 3; bi++) {
                    uint64_t count = counts[ci];
                    struct cuda_p2p_tplan p =
                        cuda_p2p_tplan_cut(&g, count, esizes[e], n, align, block_bytes);
                    assert_true(p.slice_cap > 0);
                    assert_int_equal(p.slice_cap % align, 0);
                    assert_true(p.slice_cap * esizes[e] <= g.slice_bytes);
                    if (block_bytes != 0)
                        assert_true(p.slice_cap / align * block_bytes <= g.slice_bytes);
                    uint64_t next = 0; /* parts come in order: each must start here */
                    for (uint32_t j = 0; j < p.rounds; j++) {
                        uint64_t rlo = (uint64_t)j * p.round_elems;
                        uint64_t rn = count - rlo < p.round_elems ? count - rlo : p.round_elems;
                        uint64_t slice = cuda_p2p_slice_at(rn, n, align);
                        assert_true(slice <= p.slice_cap);
                        assert_int_equal(slice % align, 0);
                        for (int q = 0; q < n; q++) {
                            uint64_t slo, shi;
                            cuda_p2p_part(rn, slice, (uint64_t)q, &slo, &shi);
                            uint64_t portion = cuda_p2p_portion_at(slice, blocks[bi], align);
                            for (uint32_t b = 0; b < blocks[bi]; b++) {
                                uint64_t lo, hi;
                                cuda_p2p_part(shi - slo, portion, b, &lo, &hi);
                                if (lo == hi)
                                    continue;
                                assert_int_equal((rlo + slo + lo) % align, 0);
                                if (rlo + slo + lo != next)
                                    fail_msg("align %u n %d esize %u count %llu blocks %u: a part "
                                             "starts at %llu, the previous ended at %llu",
                                             align, n, esizes[e], (unsigned long long)count,
                                             blocks[bi], (unsigned long long)(rlo + slo + lo),
                                             (unsigned long long)next);
                                next = rlo + slo + hi;
                            }
                        }
                    }
                    assert_int_equal(next, count);
                }
            }
        }
    }
}

static void test_ts_plan(void **state)
{
    (void)state;
    check_ts_plan(CUDA_VEC_ELEMS, 0);
}

/* The int8 / fp8 two-shot: cuts on 64-element blocks, slices whose 68-byte encoded
 * blocks fit an RS area. */
static void test_ts_plan_blocks(void **state)
{
    (void)state;
    check_ts_plan(64, 68);
}

static void all_reach(int n, uint32_t *reach)
{
    for (int r = 0; r < n; r++)
        reach[r] = (1u << n) - 1u;
}

static void test_decide(void **state)
{
    (void)state;
    int32_t pid[9], gpu[9];
    uint32_t reach[9];
    int a, b;
    /* 2 to 8 process ranks, a GPU each, peer access everywhere (NVLink). */
    for (int n = 2; n <= CUDA_MAX_RANKS; n++) {
        for (int r = 0; r < n; r++) {
            pid[r] = 100 + r;
            gpu[r] = r;
        }
        all_reach(n, reach);
        assert_int_equal(cuda_p2p_decide(n, pid, gpu, reach, &a, &b), CUDA_P2P_YES);
        assert_int_equal(a, -1);
        /* Thread ranks (one process), a GPU each: the same. */
        for (int r = 0; r < n; r++)
            pid[r] = 7;
        assert_int_equal(cuda_p2p_decide(n, pid, gpu, reach, &a, &b), CUDA_P2P_YES);
    }
    /* Two process ranks on one GPU with no peer access at all (the GPU cannot be its own
     * peer): IPC within one GPU serves them (CI-free development on one GPU). */
    pid[0] = 10, pid[1] = 11;
    gpu[0] = gpu[1] = 0;
    reach[0] = 1u, reach[1] = 2u;
    assert_int_equal(cuda_p2p_decide(2, pid, gpu, reach, &a, &b), CUDA_P2P_YES);
    /* ... but two thread ranks on one GPU never (their spins can block each other). */
    pid[1] = 10;
    assert_int_equal(cuda_p2p_decide(2, pid, gpu, reach, &a, &b), CUDA_P2P_SAME_THREAD_GPU);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    /* Peer access forced off everywhere, 4 GPUs: the first pair is named. */
    for (int r = 0; r < 4; r++) {
        pid[r] = 20 + r;
        gpu[r] = r;
        reach[r] = 1u << r;
    }
    assert_int_equal(cuda_p2p_decide(4, pid, gpu, reach, &a, &b), CUDA_P2P_NO_PEER_ACCESS);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    /* Off for one direction of one pair (2 -> 3): that pair, and only where it is. */
    all_reach(4, reach);
    reach[2] &= ~(1u << 3);
    assert_int_equal(cuda_p2p_decide(4, pid, gpu, reach, &a, &b), CUDA_P2P_NO_PEER_ACCESS);
    assert_int_equal(a, 2);
    assert_int_equal(b, 3);
    assert_int_equal(cuda_p2p_decide(3, pid, gpu, reach, &a, &b), CUDA_P2P_YES);
    /* Four process ranks on two GPUs (two per GPU), the GPUs peers: yes. */
    gpu[0] = gpu[1] = 0;
    gpu[2] = gpu[3] = 1;
    all_reach(4, reach);
    assert_int_equal(cuda_p2p_decide(4, pid, gpu, reach, &a, &b), CUDA_P2P_YES);
    /* ... with peer access off between the GPUs: the first cross pair. */
    reach[0] = reach[1] = 3u;
    reach[2] = reach[3] = 12u;
    assert_int_equal(cuda_p2p_decide(4, pid, gpu, reach, &a, &b), CUDA_P2P_NO_PEER_ACCESS);
    assert_int_equal(a, 0);
    assert_int_equal(b, 2);
    /* Past the most GPUs a communicator joins. */
    for (int r = 0; r < 9; r++) {
        pid[r] = r;
        gpu[r] = r;
    }
    all_reach(9, reach);
    assert_int_equal(cuda_p2p_decide(9, pid, gpu, reach, &a, &b), CUDA_P2P_TOO_MANY);
}

static void test_host_reach(void **state)
{
    (void)state;
    uint8_t m[16];
    assert_false(cuda_p2p_host_reach(0, m));
    m[0] = 0; /* one GPU: its own diagonal is never asked */
    assert_true(cuda_p2p_host_reach(1, m));
    memset(m, 1, sizeof(m));
    assert_true(cuda_p2p_host_reach(4, m));
    m[1 * 4 + 3] = 0; /* GPU 1 cannot reach GPU 3 (forced off) */
    assert_false(cuda_p2p_host_reach(4, m));
    memset(m, 0, sizeof(m));
    assert_false(cuda_p2p_host_reach(2, m)); /* a PCIe host without P2P */
}

/* Until cuda-p2p is verified on two GPUs, an unforced CUDA communicator takes "cuda". */
static void test_auto(void **state)
{
    (void)state;
    assert_int_equal(CUDA_P2P_VERIFIED, 0);
    assert_string_equal(cuda_transport_auto(true, CUDA_P2P_VERIFIED), "cuda");
    assert_string_equal(cuda_transport_auto(false, CUDA_P2P_VERIFIED), "cuda");
    /* Once verified: where the GPUs reach each other, and only there. */
    assert_string_equal(cuda_transport_auto(true, true), "cuda-p2p");
    assert_string_equal(cuda_transport_auto(false, true), "cuda");
}

/* The runtime takes the first backend whose probe succeeds: "cuda" must come first. */
static void test_backend_order(void **state)
{
    (void)state;
    int cuda = -1, p2p = -1;
    for (size_t i = 0; i < rt_backend_count; i++) {
        if (strcmp(rt_backends[i]->name, "cuda") == 0)
            cuda = (int)i;
        if (strcmp(rt_backends[i]->name, "cuda-p2p") == 0)
            p2p = (int)i;
    }
#if ARCOMM_HAVE_CUDA
    assert_true(cuda >= 0);
    assert_true(p2p > cuda);
    /* ARCOMM_TRANSPORT=cuda-p2p names a transport of this build: without a GPU its probe
     * refuses, and says so under its own name. */
    char why[400] = "";
    struct transport_probe p = {.nranks = 2, .device = COMM_DEVICE_CUDA};
    const struct backend_ops *t = rt_backend_pick(&p, "cuda-p2p", why, sizeof(why));
    if (t == NULL) {
        assert_non_null(strstr(why, "transport \"cuda-p2p\" cannot serve"));
    } else {
        assert_string_equal(t->name, "cuda-p2p"); /* a machine with a GPU */
    }
#else
    assert_int_equal(cuda, -1);
    assert_int_equal(p2p, -1);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line),           cmocka_unit_test(test_areas),
        cmocka_unit_test(test_ts_areas),       cmocka_unit_test(test_ts_plan),
        cmocka_unit_test(test_ts_plan_blocks), cmocka_unit_test(test_decide),
        cmocka_unit_test(test_host_reach),     cmocka_unit_test(test_auto),
        cmocka_unit_test(test_backend_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
