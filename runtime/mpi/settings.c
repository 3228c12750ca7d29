/* SPDX-License-Identifier: MIT */
/*
 * What every rank brings to comm_init_mpi, agreed on before the setup acts on any of it.
 *
 * mpirun passes a rank only the environment of the host it starts on (unless told with
 * -x), so a knob set in one shell reaches some ranks and not others.  A knob that shapes
 * the setup then sends the ranks into different MPI calls: with
 * ARCOMM_MPI_RANKS_PER_HOST on ranks 0-1 only, those made MPI_Comm_split while ranks 2-3
 * made MPI_Comm_split_type, and all four waited for ever.  So one MPI_Iallgather, bounded
 * by the timeout, carries every rank's own verdict on its arguments, its device and
 * every setting that must be the same everywhere; each rank then judges the same table
 * the same way, and no rank takes a step that depends on them unless all agree.
 *
 * The settings: ARCOMM_MPI_RANKS_PER_HOST (how ranks are grouped into hosts) and every
 * RT_KNOB_AGREE knob (what goes into shared memory and how it is read: the hosts'
 * communicators compare them at join, but only within a host; the communicator over
 * all hosts is one communicator, whose ranks must agree as any communicator's do).  The
 * values compared are the ones set, before any is resolved for a host's hardware
 * ("auto" stays "auto"), so hosts of different kinds still agree.  The transport is not
 * among them: the hierarchical steps do not depend on it, so hosts may differ (cuda-p2p
 * where GPUs reach each other, cuda elsewhere), and within a host the ranks' join
 * compares the transports they picked.
 */
#include "init_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One rank's row of the table (sent as bytes: the ranks run one build of the library). */
struct rank_settings {
    int32_t status;                /* this rank's own checks (comm_status_t) */
    int32_t device;                /* cfg->device, COMM_DEVICE_HOST without cfg */
    uint64_t value[RT_KNOB_COUNT]; /* the knobs that must agree: rt_knob_value */
    uint8_t source[RT_KNOB_COUNT]; /* enum rt_knob_source of each */
};

/* Is knob i one every rank must have alike? */
static bool must_agree(size_t i)
{
    return (rt_knob_table[i].flags & RT_KNOB_AGREE) || i == RT_KNOB_MPI_RANKS_PER_HOST;
}

static void fill_row(const struct comm *tc, comm_status_t mine, const comm_config_t *cfg,
                     struct rank_settings *row)
{
    memset(row, 0, sizeof(*row));
    row->status = mine;
    row->device = cfg != NULL ? (int32_t)cfg->device : (int32_t)COMM_DEVICE_HOST;
    for (size_t i = 0; i < rt_knob_count; i++) {
        if (!must_agree(i))
            continue;
        row->source[i] = (uint8_t)tc->knobs.source[i];
        row->value[i] = rt_knob_value(&tc->knobs, i);
    }
}

/* Do rows a and b hold the same knob i (the device for i == RT_KNOB_COUNT)? */
static bool same_setting(const struct rank_settings *a, const struct rank_settings *b, size_t i)
{
    return i == RT_KNOB_COUNT ? a->device == b->device : a->value[i] == b->value[i];
}

/* "ranks 0-3,6": the ranks not done yet that hold what rows[first] holds for knob i
 * (the device for i == RT_KNOB_COUNT), into buf; marks them done. */
static void rank_list(const struct rank_settings *rows, int n, int first, size_t i, bool *done,
                      char *buf, size_t len)
{
    size_t used = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = first; r < n; r++) {
        if (done[r] || !same_setting(&rows[r], &rows[first], i))
            continue;
        int last = r;
        while (last + 1 < n && !done[last + 1] && same_setting(&rows[last + 1], &rows[first], i))
            last++;
        for (int k = r; k <= last; k++)
            done[k] = true;
        count += last - r + 1;
        if (used + 24 < len)
            used += (size_t)snprintf(buf + used, len - used, last == r ? "%s%d" : "%s%d-%d",
                                     used ? "," : "", r, last);
        else if (used + 4 < len && buf[used - 1] != '.')
            used += (size_t)snprintf(buf + used, len - used, ",...");
        r = last;
    }
    /* "rank 3" or "ranks 0-2": the word goes first. */
    char tmp[96];
    snprintf(tmp, sizeof(tmp), "%s %s", count == 1 ? "rank" : "ranks", buf);
    snprintf(buf, len, "%s", tmp);
}

/* The value of knob i in row, as the user would write it. */
static void value_text(const struct rank_settings *row, size_t i, char *buf, size_t len)
{
    struct rt_knobs k;
    memset(&k, 0, sizeof(k));
    rt_knob_set_value(&k, i, row->value[i]);
    rt_knob_format(&k, i, buf, len);
}

/*
 * COMM_ERR_MISMATCH for knob i: every group of ranks with its value and where the value
 * came from, and the fix.  extra: how many more knobs differ.
 */
static comm_status_t knob_mismatch(struct comm *tc, const struct rank_settings *rows, size_t i,
                                   int extra)
{
    int n = tc->nranks;
    bool *done = calloc((size_t)n, sizeof(*done));
    if (done == NULL) {
        rt_error(tc, COMM_ERR_MISMATCH,
                 "comm_init_mpi: rank %d: the ranks have different values of %s: every rank "
                 "must have the same (mpirun -x %s)",
                 tc->rank, rt_knob_table[i].name, rt_knob_table[i].name);
        return COMM_ERR_MISMATCH;
    }
    char groups[300] = "";
    size_t used = 0;
    bool config = false;
    int ngroups = 0;
    for (int r = 0; r < n; r++) {
        if (done[r])
            continue;
        char who[96], value[48];
        value_text(&rows[r], i, value, sizeof(value));
        enum rt_knob_source src = (enum rt_knob_source)rows[r].source[i];
        config = config || src == RT_SRC_CONFIG;
        rank_list(rows, n, r, i, done, who, sizeof(who));
        if (++ngroups > 3) {
            if (used + 16 < sizeof(groups))
                used += (size_t)snprintf(groups + used, sizeof(groups) - used, ", ...");
            break;
        }
        if (used < sizeof(groups))
            used += (size_t)snprintf(
                groups + used, sizeof(groups) - used, "%s%s (%s) on %s", used ? ", " : "", value,
                src == RT_SRC_DEFAULT ? "unset: the default" : rt_knob_source_name(src), who);
    }
    free(done);
    char more[48] = "";
    if (extra > 0)
        snprintf(more, sizeof(more), " (and %d more setting%s)", extra, extra == 1 ? "" : "s");
    const char *name = rt_knob_table[i].name;
    rt_error(tc, COMM_ERR_MISMATCH,
             "comm_init_mpi: rank %d: %s differs between the ranks%s: %s; every rank must have "
             "the same value: set it where mpirun runs and pass it on with `mpirun -x %s` (a "
             "variable reaches only the ranks of the host it was set on), or unset it "
             "everywhere%s",
             tc->rank, name, more, groups, name,
             config ? "; and pass the same cfg->knob_defaults on every rank" : "");
    return COMM_ERR_MISMATCH;
}

/* COMM_ERR_INVALID: the ranks pass different cfg->device. */
static comm_status_t device_mismatch(struct comm *tc, const struct rank_settings *rows)
{
    int n = tc->nranks;
    bool *done = calloc((size_t)n, sizeof(*done));
    char groups[300] = "";
    size_t used = 0;
    for (int r = 0; done != NULL && r < n && used < sizeof(groups); r++) {
        if (done[r])
            continue;
        char who[96];
        int32_t dev = rows[r].device;
        rank_list(rows, n, r, RT_KNOB_COUNT, done, who, sizeof(who));
        const char *name = dev == COMM_DEVICE_HOST      ? "COMM_DEVICE_HOST"
                           : dev == COMM_DEVICE_CUDA    ? "COMM_DEVICE_CUDA"
                           : dev == COMM_DEVICE_HEXAGON ? "COMM_DEVICE_HEXAGON"
                                                        : "an unknown device";
        used += (size_t)snprintf(groups + used, sizeof(groups) - used, "%s%s (%d) on %s",
                                 used ? ", " : "", name, (int)dev, who);
    }
    free(done);
    rt_error(tc, COMM_ERR_INVALID,
             "comm_init_mpi: rank %d: the ranks pass different cfg->device (%s): every rank "
             "must pass the same device",
             tc->rank, groups);
    return COMM_ERR_INVALID;
}

comm_status_t rt_mpi_agree_settings(struct comm *tc, MPI_Comm mc, comm_status_t mine,
                                    const comm_config_t *cfg, uint64_t deadline)
{
    const char *what = "comm_init_mpi (the ranks' arguments and settings)";
    int n = tc->nranks;
    /* mpi_ctl_new: a wait that gives up leaves the buffers to MPI (mpi_link.h). */
    struct rank_settings *rows = mpi_ctl_new(((size_t)n + 1) * sizeof(*rows));
    if (rows == NULL) {
        rt_error(tc, COMM_ERR_NOMEM, "comm_init_mpi: rank %d: out of memory in %s", tc->rank, what);
        return COMM_ERR_NOMEM; /* the peers wait for this rank until their timeout */
    }
    struct rank_settings *mine_row = &rows[n];
    fill_row(tc, mine, cfg, mine_row);
    MPI_Request req;
    int err = MPI_Iallgather(mine_row, (int)sizeof(*mine_row), MPI_BYTE, rows,
                             (int)sizeof(*mine_row), MPI_BYTE, mc, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(rows, true);
        return mpi_link_error(tc, err, "MPI_Iallgather");
    }
    comm_status_t st = mpi_link_wait(tc, NULL, &req, 1, deadline, false, what);
    if (st != COMM_OK) {
        mpi_ctl_done(rows, false);
        return mine != COMM_OK ? mine : st;
    }

    /* The same verdict on every rank, from the same table: a rank's own failure first
     * (it said why), then the device, then the knobs. */
    if (mine != COMM_OK) {
        st = mine;
    } else {
        for (int r = 0; r < n && st == COMM_OK; r++) {
            if (rows[r].status == COMM_OK)
                continue;
            rt_error(tc, COMM_ERR_PEER,
                     "comm_init_mpi: rank %d: rank %d failed in %s (%s); see that rank's "
                     "comm_last_error",
                     tc->rank, r, what, rt_status_string((comm_status_t)rows[r].status));
            st = COMM_ERR_PEER;
        }
    }
    for (int r = 1; r < n && st == COMM_OK; r++)
        if (rows[r].device != rows[0].device)
            st = device_mismatch(tc, rows);
    size_t first = RT_KNOB_COUNT;
    int extra = 0;
    for (size_t i = 0; i < rt_knob_count && st == COMM_OK; i++) {
        if (!must_agree(i))
            continue;
        bool differs = false;
        for (int r = 1; r < n && !differs; r++)
            differs = rows[r].value[i] != rows[0].value[i];
        if (differs && first == RT_KNOB_COUNT)
            first = i;
        else if (differs)
            extra++;
    }
    if (st == COMM_OK && first != RT_KNOB_COUNT)
        st = knob_mismatch(tc, rows, first, extra);
    mpi_ctl_done(rows, true);
    return st;
}
