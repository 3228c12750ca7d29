/* SPDX-License-Identifier: MIT */
/*
 * arrun's command line: options, the usage text, and the program looked up the way
 * execvp would, so that every mistake is reported before any rank starts.
 */
#include "arrun.h"

#include <arcomm.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ARRUN_VERSION
#define ARRUN_VERSION "unknown"
#endif

#define ARRUN_MAX_RANKS 65536 /* a sanity bound: each rank is a process of this host */
#define ARRUN_GRACE_S   3.0

/* One line, as GNU tools write it (help2man makes the man page's SYNOPSIS of it); the
 * options are listed in usage_text. */
static const char usage_line[] = "Usage: arrun -n N [OPTION]... [--] PROGRAM [ARGS]...\n";

static const char usage_text[] =
    "\n"
    "Starts N copies of PROGRAM as the ranks of one arcomm job on this host.\n"
    "\n"
    "  -n N            number of ranks (1 or more); mpirun's -np N and --np N too\n"
    "  --bind WHAT     where ranks run, through hwloc, within the cpus arrun may run on\n"
    "                  (its affinity: taskset, a cgroup's cpuset): core (default; one\n"
    "                  core per rank, round robin, a warning when ranks share cores),\n"
    "                  numa (NUMA nodes, round robin) or none (arrun's own affinity);\n"
    "                  mpirun's spelling --bind-to WHAT too\n"
    "  --cpus-per-rank N\n"
    "                  N consecutive cores per rank (hwloc's order), wrapping around\n"
    "                  with a warning; with --bind numa, the rank gets its whole node and\n"
    "                  N only says how many of its cores it uses.  Sets OMP_NUM_THREADS=N\n"
    "                  unless it is set already.  N above the cores there are: exit 2\n"
    "  --report-bindings\n"
    "                  print each rank's cores and cpus on stderr before it starts\n"
    "  --oversubscribe\n"
    "                  ranks may share cores: no warning when they do (as mpirun's)\n"
    "  -x NAME=VALUE   set NAME in every rank's environment; -x NAME passes arrun's own\n"
    "                  value (NAME must be set); repeatable\n"
    "  --output-filename DIR\n"
    "                  each rank's stdout and stderr go to DIR/rank.R/stdout and\n"
    "                  DIR/rank.R/stderr instead of the terminal (with --label: to both,\n"
    "                  the terminal's lines labelled, the files as the rank wrote them)\n"
    "  --timeout SEC   end the whole job after SEC seconds (fractions allowed); exit 124\n"
    "  --grace SEC     seconds between SIGTERM and SIGKILL when ending ranks (default 3)\n"
    "  --label         prefix every output line with \"[rank] \"\n"
    "  --shared-heap   preload libarcomm_heap.so (beside libarcomm) in every rank: large\n"
    "                  allocations come from memory the other ranks map, so that process\n"
    "                  ranks reach each other's malloc'd buffers (the one-pass path);\n"
    "                  a path LD_PRELOAD cannot hold (a space, colon or $) is preloaded\n"
    "                  through a link of arrun's own in $TMPDIR or /tmp, removed after\n"
    "                  the job\n"
    "  -h, --help      print this help and exit\n"
    "  --version       print the version and exit\n"
    "\n"
    "Each rank gets ARCOMM_RANK, ARCOMM_SIZE, ARCOMM_LOCAL_RANK, ARCOMM_LOCAL_SIZE and\n"
    "ARCOMM_ID (a fresh id for every job), so comm_init_env() joins the job, and\n"
    "torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (the same numbers);\n"
    "arrun's values replace inherited ones, and -x of one of these names is an error.\n"
    "When a rank fails, the others get SIGTERM, then SIGKILL after the grace period.\n"
    "\n"
    "Exit status: 0 when every rank exits 0; else the status of the first rank that\n"
    "failed (128+N for signal N); 124 on --timeout; 128+N when arrun gets signal N\n"
    "(SIGINT, SIGTERM, SIGHUP are passed on to every rank); 2 for bad usage or a\n"
    "PROGRAM that cannot be found or run (checked before any rank starts: the file, its\n"
    "#! interpreter, its ELF machine); 1 when arrun itself cannot run the job.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    char what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    arrun_msg("%s", what);
    fprintf(stderr, "%sTry 'arrun --help' for more.\n", usage_line);
    return ARRUN_EXIT_USAGE;
}

static int parse_seconds(const char *text, bool allow_zero, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v) || v < 0 || (v == 0 && !allow_zero) ||
        v > 1e9)
        return -EINVAL;
    *out = v;
    return 0;
}

/* 0, or -errno: what execve would say about this file. */
static int check_executable(const char *path)
{
    struct stat st;

    if (stat(path, &st) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    if (!S_ISREG(st.st_mode) || access(path, X_OK) < 0)
        return -EACCES;
    return 0;
}

/*
 * The file execvp would run: PROGRAM itself when it has a '/', else the first
 * executable PROGRAM in PATH (confstr's default path when PATH is unset; an empty
 * element is the current directory).  Checked before any fork so that a typo is a
 * usage error, not N failed ranks.
 */
static int find_program(const char *name, char **out)
{
    const char *path = getenv("PATH");
    char default_path[256];
    int status = -ENOENT;
    size_t name_len = strlen(name);

    if (name_len == 0)
        return -ENOENT;
    if (strchr(name, '/')) {
        status = check_executable(name);
        if (status == 0 && !(*out = strdup(name)))
            status = -ENOMEM;
        return status;
    }
    if (!path) {
        if (confstr(_CS_PATH, default_path, sizeof(default_path)) == 0)
            snprintf(default_path, sizeof(default_path), "/bin:/usr/bin");
        path = default_path;
    }
    for (const char *dir = path;; dir++) {
        const char *end = strchrnul(dir, ':');
        int dir_len = (int)(end - dir);
        size_t cap = (size_t)dir_len + name_len + 3;
        char *candidate = malloc(cap);
        int rc;

        if (!candidate)
            return -ENOMEM;
        if (dir_len == 0)
            snprintf(candidate, cap, "./%s", name);
        else
            snprintf(candidate, cap, "%.*s/%s", dir_len, dir, name);
        rc = check_executable(candidate);
        if (rc == 0) {
            *out = candidate;
            return 0;
        }
        free(candidate);
        /* Like execvp: a match that cannot be run beats "not found". */
        if (rc == -EACCES)
            status = rc;
        dir = end;
        if (*dir == '\0')
            break;
    }
    return status;
}

/*
 * What the kernel would refuse to exec although the file is an executable file: a
 * script whose interpreter is missing or cannot be run, or a file that is neither an
 * ELF executable of this machine (the class, byte order and machine of arrun's own
 * ELF header) nor a script.  Returns 0, or -1 with why[] filled.  A file arrun may not
 * read is left to exec (execute-only binaries exist).
 */
static int check_format(const char *path, int depth, char *why, size_t why_len)
{
    unsigned char head[256], self[20];
    ssize_t n, m;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, head, sizeof(head) - 1);
    close(fd);
    if (n < 0)
        return 0;
    if (n >= 2 && head[0] == '#' && head[1] == '!') {
        char interp[sizeof(head)];
        size_t i = 2, k = 0;
        int rc;

        while (i < (size_t)n && (head[i] == ' ' || head[i] == '\t'))
            i++;
        while (i < (size_t)n && head[i] != ' ' && head[i] != '\t' && head[i] != '\n' &&
               head[i] != '\0')
            interp[k++] = (char)head[i++];
        interp[k] = '\0';
        if (k == 0) {
            snprintf(why, why_len, "its #! line names no interpreter");
            return -1;
        }
        if (i == (size_t)n && n == (ssize_t)sizeof(head) - 1) {
            snprintf(why, why_len, "its #! line is longer than %zu bytes", sizeof(head) - 2);
            return -1;
        }
        rc = check_executable(interp);
        if (rc < 0) {
            snprintf(why, why_len, "its interpreter %s (from the #! line) %s", interp,
                     rc == -ENOENT ? "does not exist" : "cannot be run");
            return -1;
        }
        /* Linux lets an interpreter be a script itself, a few levels deep. */
        if (depth < 4) {
            char inner[512];
            if (check_format(interp, depth + 1, inner, sizeof(inner)) < 0) {
                snprintf(why, why_len, "its interpreter %.200s cannot be run: %.200s", interp,
                         inner);
                return -1;
            }
        }
        return 0;
    }
    if (n < 20 || memcmp(head,
                         "\x7f"
                         "ELF",
                         4) != 0) {
        snprintf(why, why_len, "it is neither an ELF executable nor a script starting with #!");
        return -1;
    }
    fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    m = read(fd, self, sizeof(self));
    close(fd);
    /* EI_CLASS, EI_DATA and e_machine (bytes 18-19, in the file's own byte order). */
    if (m == (ssize_t)sizeof(self) &&
        (head[4] != self[4] || head[5] != self[5] || memcmp(head + 18, self + 18, 2) != 0)) {
        snprintf(why, why_len, "it is an ELF executable for another machine or ABI");
        return -1;
    }
    return 0;
}

static int log_verbosity(void)
{
    const char *level = getenv("ARCOMM_LOG_LEVEL");

    if (!level)
        return 0;
    if (strcmp(level, "info") == 0)
        return 1;
    if (strcmp(level, "debug") == 0 || strcmp(level, "trace") == 0)
        return 2;
    return 0;
}

/* The names arrun sets for each rank itself: -x cannot set them. */
static const char *const rank_names[] = {
    "ARCOMM_RANK", "ARCOMM_SIZE", "ARCOMM_LOCAL_RANK", "ARCOMM_LOCAL_SIZE", "ARCOMM_ID",
    "RANK",        "WORLD_SIZE",  "LOCAL_RANK",        "LOCAL_WORLD_SIZE",
};

/* -x NAME=VALUE or -x NAME: returns -1 when added, else the status arrun exits with. */
static int add_env(struct arrun_opts *o, const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    struct arrun_env *env;
    const char *value;
    char *name;

    if (name_len == 0)
        return usage_error("-x needs NAME or NAME=VALUE, not '%s'", arg);
    name = strndup(arg, name_len);
    if (!name) {
        arrun_msg("out of memory");
        return ARRUN_EXIT_ERROR;
    }
    for (size_t i = 0; i < sizeof(rank_names) / sizeof(rank_names[0]); i++) {
        if (strcmp(name, rank_names[i]) == 0) {
            free(name);
            return usage_error("-x %s: arrun sets %s itself, for each rank", rank_names[i],
                               rank_names[i]);
        }
    }
    value = eq ? eq + 1 : getenv(name);
    if (!value) {
        int status = usage_error("-x %s: %s is not set in arrun's environment (use -x %s=VALUE)",
                                 name, name, name);
        free(name);
        return status;
    }
    env = realloc(o->env, ((size_t)o->nenv + 1) * sizeof(*env));
    if (!env) {
        free(name);
        arrun_msg("out of memory");
        return ARRUN_EXIT_ERROR;
    }
    o->env = env;
    o->env[o->nenv++] = (struct arrun_env){.name = name, .value = value};
    return -1;
}

void arrun_opts_free(struct arrun_opts *o)
{
    free(o->heap_preload);
    o->heap_preload = NULL;
    free(o->heap_lib);
    o->heap_lib = NULL;
    free(o->heap_dir);
    o->heap_dir = NULL;
    for (int i = 0; i < o->nenv; i++)
        free(o->env[i].name);
    free(o->env);
    o->env = NULL;
    o->nenv = 0;
    free(o->path);
    o->path = NULL;
}

/* Returns -1 to go on with the job, else the status arrun exits with. */
int arrun_parse_options(int argc, char **argv, struct arrun_opts *o)
{
    static const struct option longopts[] = {
        {.name = "bind", .has_arg = required_argument, .val = 'b'},
        /* mpirun's spellings, for the commands people already type. */
        {.name = "np", .has_arg = required_argument, .val = 'n'},
        {.name = "bind-to", .has_arg = required_argument, .val = 'b'},
        {.name = "oversubscribe", .has_arg = no_argument, .val = 'O'},
        {.name = "timeout", .has_arg = required_argument, .val = 't'},
        {.name = "grace", .has_arg = required_argument, .val = 'g'},
        {.name = "label", .has_arg = no_argument, .val = 'l'},
        {.name = "cpus-per-rank", .has_arg = required_argument, .val = 'c'},
        {.name = "report-bindings", .has_arg = no_argument, .val = 'r'},
        {.name = "output-filename", .has_arg = required_argument, .val = 'o'},
        {.name = "shared-heap", .has_arg = no_argument, .val = 'H'},
        {.name = "help", .has_arg = no_argument, .val = 'h'},
        {.name = "version", .has_arg = no_argument, .val = 'V'},
        {0},
    };
    bool have_n = false;
    int c, status;

    memset(o, 0, sizeof(*o));
    o->bind = ARRUN_BIND_CORE;
    o->grace_s = ARRUN_GRACE_S;
    o->verbose = log_verbosity();

    opterr = 0;
    /* '+': options end at PROGRAM, whose own options are its business. */
    while ((c = getopt_long(argc, argv, "+:n:hx:", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            char *end;
            long n;
            /* mpirun's -np N: getopt reads it as -n with the value "p". */
            if (strcmp(optarg, "p") == 0 && optind < argc)
                optarg = argv[optind++];
            errno = 0;
            n = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end != '\0')
                return usage_error("-n needs a number of ranks, not '%s'", optarg);
            if (n < 1 || n > ARRUN_MAX_RANKS)
                return usage_error("-n must be between 1 and %d, not %ld", ARRUN_MAX_RANKS, n);
            o->nranks = (int)n;
            have_n = true;
            break;
        }
        case 'b':
            if (strcmp(optarg, "none") == 0)
                o->bind = ARRUN_BIND_NONE;
            else if (strcmp(optarg, "core") == 0)
                o->bind = ARRUN_BIND_CORE;
            else if (strcmp(optarg, "numa") == 0)
                o->bind = ARRUN_BIND_NUMA;
            else
                return usage_error("--bind takes none, core or numa, not '%s'", optarg);
            break;
        case 'O':
            o->oversubscribe = true;
            break;
        case 't':
            if (parse_seconds(optarg, false, &o->timeout_s) < 0)
                return usage_error("--timeout needs seconds above 0, not '%s'", optarg);
            break;
        case 'g':
            if (parse_seconds(optarg, true, &o->grace_s) < 0)
                return usage_error("--grace needs seconds (0 or more), not '%s'", optarg);
            break;
        case 'l':
            o->label = true;
            break;
        case 'c': {
            char *end;
            long n;
            errno = 0;
            n = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end != '\0' || n < 1 || n > ARRUN_MAX_RANKS)
                return usage_error("--cpus-per-rank needs a number of cores (1 or more), not '%s'",
                                   optarg);
            o->cpus_per_rank = (int)n;
            break;
        }
        case 'r':
            o->report_bindings = true;
            break;
        case 'o':
            if (optarg[0] == '\0')
                return usage_error("--output-filename needs a directory, not ''");
            o->output_dir = optarg;
            break;
        case 'H':
            o->shared_heap = true;
            break;
        case 'x':
            status = add_env(o, optarg);
            if (status >= 0)
                return status;
            break;
        case 'h':
            printf("%s%s", usage_line, usage_text);
            return 0;
        case 'V': {
            int major, minor, patch;
            comm_get_version(&major, &minor, &patch);
            printf("arrun %s (libarcomm %d.%d.%d)\n", ARRUN_VERSION, major, minor, patch);
            return 0;
        }
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt)
                return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (!have_n)
        return usage_error("the number of ranks is missing: -n N");
    if (o->cpus_per_rank > 0 && o->bind == ARRUN_BIND_NONE)
        return usage_error("--cpus-per-rank needs --bind core or numa, not --bind none");
    if (optind >= argc)
        return usage_error("no program to run");
    if (o->shared_heap && (status = arrun_heap_find(o)) >= 0)
        return status;
    o->argv = argv + optind;

    status = find_program(o->argv[0], &o->path);
    if (status == -ENOENT && !strchr(o->argv[0], '/'))
        return usage_error("program '%s' not found in PATH", o->argv[0]);
    if (status == -ENOMEM) {
        arrun_msg("out of memory");
        return ARRUN_EXIT_ERROR;
    }
    if (status < 0)
        return usage_error("cannot run '%s': %s", o->argv[0], strerror(-status));
    {
        char why[512];
        if (check_format(o->path, 0, why, sizeof(why)) < 0)
            return usage_error("cannot run '%s': %s", o->path, why);
    }
    return -1;
}
