/* SPDX-License-Identifier: MIT */
/*
 * The knob table: every ARCOMM_* setting, declared once (name, type, default, doc),
 * parsed into a communicator at comm_init.  Nothing else in arcomm calls getenv.
 */
#ifndef ARCOMM_RT_KNOBS_H
#define ARCOMM_RT_KNOBS_H

#include "arcomm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A size knob set to "off": the feature it gates never applies. */
#define RT_SIZE_OFF SIZE_MAX
/* A size knob left at "auto": the transport picks (a measured default).  A knob flagged
 * RT_KNOB_AUTO_DEFAULT reads "auto" as its default instead (the parser resolves it). */
#define RT_SIZE_AUTO (SIZE_MAX - 1)

enum rt_log_level {
    RT_LOG_NONE = 0,
    RT_LOG_ERROR,
    RT_LOG_WARN,
    RT_LOG_INFO,
    RT_LOG_DEBUG,
    RT_LOG_TRACE,
};

enum rt_knob_type {
    RT_KNOB_INT,    /* long, decimal */
    RT_KNOB_SIZE,   /* size_t bytes, K/M/G suffixes (powers of two), "off", "auto" */
    RT_KNOB_BOOL,   /* 0/1, yes/no, on/off, true/false */
    RT_KNOB_STRING, /* up to RT_KNOB_STR_MAX - 1 bytes */
    RT_KNOB_LOGLEVEL,
    RT_KNOB_CODEC, /* a wire codec of transports/base/wire.h, by name (int field) */
};

enum rt_knob_source {
    RT_SRC_DEFAULT = 0,
    RT_SRC_ENV,    /* the ARCOMM_* environment variable */
    RT_SRC_CONFIG, /* a field of comm_config_t */
};

#define RT_KNOB_STR_MAX 256

/* No lower or upper bound for an INT or SIZE knob (its type's own limits apply). */
#define RT_KNOB_NOMIN INT64_MIN
#define RT_KNOB_NOMAX INT64_MAX

/* Hexagon: HVX worker threads of a session at most (hexagon.c checks it is
 * HEX_MAX_THREADS). */
#define RT_KNOB_HEX_THREADS_MAX 8

/*
 * The knobs, one X(...) per knob: X(id, type, default, field, min, max, flags, doc).
 * The variable is ARCOMM_<id> and its index RT_KNOB_<id> (enum rt_knob_id below), so a
 * renamed knob fails to compile wherever it is used by index.  min and max bound the
 * numbers of INT and SIZE knobs (inclusive; "off" and "auto" are not numbers and are
 * not bounded, unless RT_KNOB_NO_OFF / RT_KNOB_NO_AUTO refuse them); the parser refuses a
 * value outside them, naming the knob, the value and the range.  Grouped in sub-tables: the common
 * and host knobs, then one per backend.
 *
 * Defaults measured on the 2-core development machine (docs/PERFORMANCE.md says how):
 * the flag path wins up to about 16 KiB between two ranks; staging slots of 1 MiB keep
 * a pipelined round within L2 while still amortising the two synchronisations.
 * RT_KNOB_AGREE knobs: README.md's knob section says why for each.
 */
#define RT_KNOBS_COMMON(X)                                                                         \
    X(LOG_LEVEL, RT_KNOB_LOGLEVEL, "warn", log_level, 0, 0, 0,                                     \
      "log verbosity: none, error, warn, info, debug, trace")                                      \
    X(LOG_FILE, RT_KNOB_STRING, "", log_file, 0, 0, 0,                                             \
      "log destination (empty = stderr); %h expands to the host name, %p to the pid")              \
    X(TIMEOUT_MS, RT_KNOB_INT, "120000", timeout_ms, RT_KNOB_NOMIN, RT_KNOB_NOMAX, 0,              \
      "how long a rank waits for its peers before COMM_ERR_TIMEOUT; < 0 = never")                  \
    X(TRANSPORT, RT_KNOB_STRING, "", transport, 0, 0, 0,                                           \
      "transport to use (shm, cuda, cuda-p2p, hexagon); empty = the first whose probe succeeds")   \
    X(SPIN_NS, RT_KNOB_INT, "-1", spin_ns, RT_KNOB_NOMIN, RT_KNOB_NOMAX, 0,                        \
      "busy-poll this long before yielding (-1 = 50 us; 0 when ranks outnumber cores)")            \
    X(YIELD_NS, RT_KNOB_INT, "1000000", yield_ns, RT_KNOB_NOMIN, RT_KNOB_NOMAX, 0,                 \
      "after spinning, sched_yield for this long before sleeping on a futex")                      \
    X(NUMA, RT_KNOB_BOOL, "1", numa, 0, 0, 0,                                                      \
      "bind each rank's staging memory to the NUMA node of the rank that writes it")               \
    X(MPI_RANKS_PER_HOST, RT_KNOB_INT, "0", mpi_ranks_per_host, 0, RT_KNOB_NOMAX, 0,               \
      "comm_init_mpi: every N consecutive ranks form one host (0 = MPI's shared-memory split)")    \
    X(PROGRESS, RT_KNOB_STRING, "thread", progress, 0, 0, 0,                                       \
      "who runs asynchronous calls (comm_iallreduce ...): thread (a progress thread per "          \
      "communicator) or caller (comm_test and comm_wait)")

/* The shm segment's and the host paths' knobs (the host backend's; the Hexagon backend's
 * segment reads the slot and the arena too).  The slot's lower bound depends on nranks:
 * rt_knobs_check has it, not the table. */
#define RT_KNOBS_HOST(X)                                                                           \
    X(FLAG_THRESHOLD, RT_KNOB_SIZE, "auto", flag_threshold, 0, RT_KNOB_NOMAX, RT_KNOB_AGREE,       \
      "host: messages up to this many bytes take the one-round-trip flag path")                    \
    X(BF16_THRESHOLD, RT_KNOB_SIZE, "auto", bf16_threshold, 0, RT_KNOB_NOMAX, RT_KNOB_AGREE,       \
      "f32 messages of at least this many bytes travel as bf16 (off on host, on for cuda)")        \
    X(WIRE, RT_KNOB_CODEC, "bf16", wire, 0, 0, RT_KNOB_AGREE,                                      \
      "wire codec of f32/f16/bf16 sums and averages from WIRE_THRESHOLD: none, bf16, int8, fp8 "   \
      "(docs/wire.md)")                                                                            \
    X(WIRE_THRESHOLD, RT_KNOB_SIZE, "auto", wire_threshold, 0, RT_KNOB_NOMAX, RT_KNOB_AGREE,       \
      "messages of at least this many bytes travel in the ARCOMM_WIRE codec (auto: "               \
      "ARCOMM_BF16_THRESHOLD's value)")                                                            \
    X(SHM_SLOT_BYTES, RT_KNOB_SIZE, "1M", shm_slot_bytes, 0, RT_KNOB_NOMAX, RT_KNOB_AGREE,         \
      "size of each of the two staging slots of every rank in the shared segment")                 \
    X(MEM_POOL_BYTES, RT_KNOB_SIZE, "64M", mem_pool_bytes, 0, RT_KNOB_NOMAX, RT_KNOB_AUTO_DEFAULT, \
      "comm_mem_alloc arena of every rank in the shared segment (sparse until used)")              \
    X(NT_THRESHOLD, RT_KNOB_SIZE, "auto", nt_threshold, 0, RT_KNOB_NOMAX, 0,                       \
      "one-pass calls moving this many bytes (all ranks' inputs and outputs) stream their "        \
      "stores")                                                                                    \
    X(CMA_THRESHOLD, RT_KNOB_SIZE, "auto", cma_threshold, 0, RT_KNOB_NOMAX, RT_KNOB_AGREE,         \
      "host: process ranks' bulk calls of at least this many bytes copy straight between "         \
      "private buffers (process_vm_readv/writev; auto: where measured faster; off: never)")        \
    X(CMA_FAST, RT_KNOB_INT, "-1", cma_fast, -1, 1, 0,                                             \
      "host: is the single copy fast here, for CMA_THRESHOLD=auto's wider windows: -1 = "          \
      "measured at first use, 1 = yes, 0 = no (each process its own)")                             \
    X(BCAST_EAGER, RT_KNOB_SIZE, "off", bcast_eager, 0, 512, RT_KNOB_AGREE | RT_KNOB_NO_AUTO,      \
      "host: broadcasts up to this many bytes are eager, as in MPI: the root returns once its "    \
      "message is staged, a mismatch fails the others, the root at a later call (off: never)")     \
    X(REDUCE_EAGER, RT_KNOB_SIZE, "off", reduce_eager, 0, 512, RT_KNOB_AGREE | RT_KNOB_NO_AUTO,    \
      "host: reduces up to this many bytes are eager, as in MPI: every rank but the root returns " \
      "once its input is staged, a mismatch fails the root, the others at a later call (off: "     \
      "never)")                                                                                    \
    X(SMALL_ALGO, RT_KNOB_STRING, "flat", small_alg, 0, 0, 0,                                      \
      "host: flag-sized allreduce: flat (every rank reads every peer), gather (a dissemination "   \
      "allgather, log2 n rounds), auto (flat: gather lost at 4-16 ranks); the same on every rank") \
    X(SMALL_GATHER_MAX, RT_KNOB_SIZE, "256", small_gather_max, 0, 65536, RT_KNOB_AGREE,            \
      "host: largest allreduce message (bytes per rank) the gather path takes (off: none)")        \
    X(STAGED_CHUNK_BYTES, RT_KNOB_SIZE, "auto", staged_chunk_bytes, 64, RT_KNOB_NOMAX,             \
      RT_KNOB_AGREE | RT_KNOB_NO_OFF,                                                              \
      "host: bytes per rank of each round of the staged allreduce (auto: from the L2 and L3 "      \
      "sizes and the rank count)")                                                                 \
    X(PATHS, RT_KNOB_STRING, "", paths, 0, 0, RT_KNOB_AGREE,                                       \
      "rows tried before the backend's path table's, e.g. allreduce:0-64K:flag;broadcast:1M-:cma " \
      "(host), allreduce:0-:copy (cuda) (docs/paths.md)")

/* The CUDA backend's knobs, resolved by collectives/cuda/backend.c. */
#define RT_KNOBS_CUDA(X)                                                                           \
    X(COPY_THRESHOLD, RT_KNOB_SIZE, "auto", cuda.copy_threshold, 0, RT_KNOB_NOMAX, RT_KNOB_AGREE,  \
      "cuda: messages of at least this many bytes take the copy-engine path")                      \
    X(COPY_CHUNK_BYTES, RT_KNOB_SIZE, "auto", cuda.copy_chunk_bytes, 0, RT_KNOB_NOMAX,             \
      RT_KNOB_AGREE | RT_KNOB_NO_OFF, "cuda: copy-engine chunk (auto = clamp(bytes/2, 512K, 4M))") \
    X(CUDA_STAGING_BYTES, RT_KNOB_SIZE, "32M", cuda.staging_bytes, 0, RT_KNOB_NOMAX,               \
      RT_KNOB_AGREE | RT_KNOB_NO_OFF | RT_KNOB_AUTO_DEFAULT,                                       \
      "cuda: pinned host staging of the copy-engine path, per rank")                               \
    X(CUDA_BLOCKS, RT_KNOB_INT, "0", cuda.blocks, RT_KNOB_NOMIN, RT_KNOB_NOMAX, RT_KNOB_AGREE,     \
      "cuda: kernel-path blocks at most (0 = auto: 128)")

/* The Hexagon backend's knobs, resolved by transports/hexagon/hexagon.c. */
#define RT_KNOBS_HEX(X)                                                                            \
    X(HEX_THREADS, RT_KNOB_INT, "4", hex.threads, 1, RT_KNOB_HEX_THREADS_MAX, 0,                   \
      "hexagon: HVX worker threads of each HTP session (1..8)")                                    \
    X(HEX_VTCM_BYTES, RT_KNOB_SIZE, "8M", hex.vtcm_bytes, 4096, 1 << 30,                           \
      RT_KNOB_NO_OFF | RT_KNOB_NO_AUTO,                                                            \
      "hexagon: VTCM of each HTP session; blocks shrink to fit it")                                \
    X(HEX_FENCE_TIMEOUT_MS, RT_KNOB_INT, "-1", hex.fence_timeout_ms, RT_KNOB_NOMIN, RT_KNOB_NOMAX, \
      0, "hexagon: how long a session waits at a fence (-1 = ARCOMM_TIMEOUT_MS, never more)")      \
    X(HEX_MEM, RT_KNOB_STRING, "auto", hex.mem, 0, 0, 0,                                           \
      "hexagon: buffer memory: auto (rpcmem, else dma-heap, else memfd), or one of them")          \
    X(HEX_SEQ_START, RT_KNOB_INT, "0", hex.seq_start, RT_KNOB_NOMIN, RT_KNOB_NOMAX, 0,             \
      "hexagon: fence sequence a new session starts from (tests use it to cross 2^32)")

#define RT_KNOBS(X) RT_KNOBS_COMMON(X) RT_KNOBS_HOST(X) RT_KNOBS_CUDA(X) RT_KNOBS_HEX(X)

/* Every knob's index into rt_knob_table and struct rt_knobs.source. */
enum rt_knob_id {
#define RT_KNOB_ID(id, type, def, field, min, max, flags, doc) RT_KNOB_##id,
    RT_KNOBS(RT_KNOB_ID)
#undef RT_KNOB_ID
        RT_KNOB_COUNT
};

/* Knob sets as bit masks over enum rt_knob_id: what a backend's communicators read. */
_Static_assert(RT_KNOB_COUNT <= 64, "knob masks are 64 bits");
#define RT_KNOB_BIT(id)                                            (UINT64_C(1) << RT_KNOB_##id)
#define RT_KNOB_BIT_OF(id, type, def, field, min, max, flags, doc) | RT_KNOB_BIT(id)
#define RT_KNOB_MASK_COMMON                                        (0 RT_KNOBS_COMMON(RT_KNOB_BIT_OF))
#define RT_KNOB_MASK_HOST                                          (0 RT_KNOBS_HOST(RT_KNOB_BIT_OF))
#define RT_KNOB_MASK_CUDA                                          (0 RT_KNOBS_CUDA(RT_KNOB_BIT_OF))
#define RT_KNOB_MASK_HEX                                           (0 RT_KNOBS_HEX(RT_KNOB_BIT_OF))
/* What every backend's shm segment reads: the common knobs, the slot and the arena. */
#define RT_KNOB_MASK_SEGMENT                                                                       \
    (RT_KNOB_MASK_COMMON | RT_KNOB_BIT(SHM_SLOT_BYTES) | RT_KNOB_BIT(MEM_POOL_BYTES))

/* Parsed values; one per communicator. */
struct rt_knobs {
    int log_level;                   /* enum rt_log_level */
    char log_file[RT_KNOB_STR_MAX];  /* "" = stderr; %h host, %p pid */
    long timeout_ms;                 /* < 0 = never */
    char transport[RT_KNOB_STR_MAX]; /* "" = automatic */
    size_t flag_threshold;           /* host: largest message on the flag path */
    size_t bf16_threshold;           /* f32 narrowed to bf16 on the wire at or above */
    int wire;                        /* enum wire_codec: ARCOMM_WIRE */
    size_t wire_threshold;           /* the codec applies at or above (auto: bf16's) */
    size_t shm_slot_bytes;           /* staging slot per rank (two per rank) */
    size_t mem_pool_bytes;           /* comm_mem_alloc arena per rank */
    size_t nt_threshold;             /* bulk outputs at or above: streaming stores */
    size_t cma_threshold;            /* host: CMA bulk path at or above (process ranks) */
    long cma_fast;                   /* host: -1 = measure whether CMA is fast, 0 no, 1 yes */
    size_t bcast_eager;              /* host: eager broadcasts up to this many bytes */
    size_t reduce_eager;             /* host: eager reduces up to this many bytes */
    char small_alg[RT_KNOB_STR_MAX]; /* host: flat, gather or auto (flag-sized allreduce) */
    size_t small_gather_max;         /* host: largest message of the gather path */
    size_t staged_chunk_bytes;       /* host: staged allreduce round, bytes per rank */
    char paths[RT_KNOB_STR_MAX];     /* ARCOMM_PATHS: rows before the backend's path table's */
    long spin_ns;                    /* busy-poll this long before yielding */
    long yield_ns;                   /* then sched_yield this long before sleeping */
    bool numa;                       /* bind staging memory to the writer's node */
    long mpi_ranks_per_host;         /* comm_init_mpi: ranks per host, 0 = MPI's split */
    char progress[RT_KNOB_STR_MAX];  /* asynchronous calls: "thread" or "caller" */
    /* RT_KNOBS_CUDA, as set (collectives/cuda/backend.c resolves them into its own
     * struct cuda_knobs). */
    struct rt_knobs_cuda {
        size_t copy_threshold;   /* copy-engine path at or above */
        size_t copy_chunk_bytes; /* copy-engine chunk, auto = clamp(n/2,..) */
        size_t staging_bytes;    /* copy-path pinned staging per rank */
        long blocks;             /* kernel-path blocks at most (0 = auto) */
    } cuda;
    /* RT_KNOBS_HEX, as set (transports/hexagon/hexagon.c resolves them into struct
     * hex_comm). */
    struct rt_knobs_hex {
        long threads;              /* HVX worker threads per session */
        size_t vtcm_bytes;         /* VTCM per session */
        long fence_timeout_ms;     /* fence wait (< 0: the comm's timeout) */
        char mem[RT_KNOB_STR_MAX]; /* auto, rpcmem, dma-heap or memfd */
        long seq_start;            /* first fence sequence (tests: wrap) */
    } hex;
    enum rt_knob_source source[RT_KNOB_COUNT]; /* where each knob's value came from */
};

/* Knob flags. */
#define RT_KNOB_AGREE                                                                              \
    0x1u                     /* changes what goes into shared memory or how it is read:            \
                              * every rank of a communicator must have rank 0's value              \
                              * (compared at join, COMM_ERR_MISMATCH otherwise) */
#define RT_KNOB_NO_OFF  0x2u /* a SIZE knob that cannot be off: "off" is out of its range */
#define RT_KNOB_NO_AUTO 0x4u /* a SIZE knob that takes only numbers: "auto" is out of range */
#define RT_KNOB_AUTO_DEFAULT                                                                       \
    0x8u /* a SIZE knob whose "auto" is its (numeric) default: rt_knobs_load resolves it */

/* The sub-table a knob is in (RT_KNOBS_COMMON, _HOST, _CUDA, _HEX). */
enum rt_knob_group {
    RT_KNOB_GROUP_COMMON = 0, /* every communicator */
    RT_KNOB_GROUP_HOST,       /* the shm segment and the host paths (bf16 is CUDA's too) */
    RT_KNOB_GROUP_CUDA,       /* read by the CUDA backend only */
    RT_KNOB_GROUP_HEX,        /* read by the Hexagon backend only */
};

struct rt_knob_desc {
    const char *name; /* ARCOMM_... */
    enum rt_knob_group group;
    enum rt_knob_type type;
    const char *def; /* default, as text */
    const char *doc; /* one line */
    size_t offset;   /* of the value in struct rt_knobs */
    int64_t min;     /* INT, SIZE: smallest number accepted (RT_KNOB_NOMIN: none) */
    int64_t max;     /* INT, SIZE: largest number accepted (RT_KNOB_NOMAX: none) */
    unsigned flags;  /* RT_KNOB_* */
};

/* Indexed by enum rt_knob_id. */
extern const struct rt_knob_desc rt_knob_table[RT_KNOB_COUNT];
extern const size_t rt_knob_count;

/*
 * Fills *k from the defaults and the environment.  On a malformed value returns
 * COMM_ERR_INVALID and writes what was wrong (the variable, its value, the accepted
 * forms) into err.
 */
comm_status_t rt_knobs_load(struct rt_knobs *k, char *err, size_t errlen);
/* rt_knobs_load with defaults ("ARCOMM_NAME=VALUE" items, separated by commas,
 * semicolons or blanks; NULL: none) in place of the table's: the environment still
 * overrides them.  A name that is no knob, or a value that does not parse, is
 * COMM_ERR_INVALID with err saying which. */
comm_status_t rt_knobs_load_with(struct rt_knobs *k, const char *defaults, char *err,
                                 size_t errlen);

/*
 * Checks the values that parse but cannot work for a communicator of nranks ranks (a
 * staging slot too small to hold a line per rank, "off" where nothing can be off).
 * Returns COMM_ERR_INVALID with the knob, its value and the valid range in err.
 */
comm_status_t rt_knobs_check(const struct rt_knobs *k, int nranks, char *err, size_t errlen);

/*
 * ARCOMM_SPIN_NS resolved: the knob when it is >= 0, else RT_KNOB_SPIN_NS_AUTO, or 0
 * when the ranks outnumber the cores (spinning then only delays the peer we wait for).
 */
#define RT_KNOB_SPIN_NS_AUTO 50000L
long rt_knobs_spin_ns(const struct rt_knobs *k, bool oversubscribed);

/* The smallest staging slot: one page, and a cache line per rank for 8-byte elements. */
size_t rt_knob_min_slot_bytes(int nranks);

/* The value of knob i as a number, for knobs whose type is INT, SIZE or BOOL. */
uint64_t rt_knob_value(const struct rt_knobs *k, size_t i);
/* Sets knob i (INT, SIZE or BOOL) from rt_knob_value's number. */
void rt_knob_set_value(struct rt_knobs *k, size_t i, uint64_t v);

/* The value of knob i as text ("64K", "off", "warn", ...). */
void rt_knob_format(const struct rt_knobs *k, size_t i, char *buf, size_t len);

const char *rt_knob_source_name(enum rt_knob_source src);
/* "common", "host", "cuda", "hexagon". */
const char *rt_knob_group_name(enum rt_knob_group g);

/* Parses "64K", "1M", "off", "auto", "123". Returns false when malformed. */
bool rt_parse_size(const char *text, size_t *out);

#endif /* ARCOMM_RT_KNOBS_H */
