/* SPDX-License-Identifier: MIT */
/*
 * arinfo: prints what arcomm sees on this host and what it would do here: the hwloc
 * tree, PCI accelerators and their NUMA locality, CUDA devices, Hexagon sessions, the
 * transports built and the one a communicator would pick, the allreduce path of each
 * message size, and every knob with its value and where the value came from.
 *
 *   arinfo [--json] [--config] [--paths] [--sizes LIST] [-n RANKS] [--topology FILE.xml]
 *          [--only SECTIONS] [--no-host] [--plan COLL SIZE] [--device DEVICE]
 *
 * The text is wrapped to the terminal (COLUMNS, else the terminal's width, else 80).
 *
 * Exit status: 0, 1 when the topology cannot be loaded, 2 on a usage error or a
 * malformed ARCOMM_* variable (what comm_init would refuse too).
 */
#include "arcomm_paths.h"
#include "arinfo.h"
#include "arcomm_build.h"
#include "shm/cma_calibrate.h"
#include "nt_calibrate.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define ARINFO_SEC_ALL 0xffu

#define STR_(x)             #x
#define STR(x)              STR_(x)
#define COMM_MAX_RANKS_TEXT STR(COMM_MAX_RANKS)

static const struct {
    const char *name;
    unsigned bit;
} section_names[] = {
    {"host", ARINFO_SEC_HOST},       {"topology", ARINFO_SEC_TOPOLOGY},
    {"pci", ARINFO_SEC_PCI},         {"cuda", ARINFO_SEC_CUDA},
    {"hexagon", ARINFO_SEC_HEXAGON}, {"transports", ARINFO_SEC_TRANSPORTS},
    {"paths", ARINFO_SEC_PATHS},     {"config", ARINFO_SEC_CONFIG},
};

#define N_SECTIONS (sizeof(section_names) / sizeof(section_names[0]))

static const char default_sizes[] = "4,64,1K,16K,64K,1M,16M,256M";

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: arinfo [OPTION]...\n"
            "\n"
            "What arcomm sees on this host and what it would do here.\n"
            "\n"
            "  --json             print JSON instead of text (schema " ARINFO_SCHEMA
            ", docs/arinfo-json.md);\n"
            "                     includes the knobs (--config) unless --only says otherwise\n"
            "  --config           every ARCOMM_* knob: value, source (default, environment), doc\n"
            "  --paths            also the path each collective takes per message size (the\n"
            "                     library's path tables; JSON always has them)\n"
            "  --plan COLL SIZE   the path a call of COLL (allreduce, broadcast, ...) moving\n"
            "                     SIZE bytes per rank takes on thread and process ranks, and\n"
            "                     the row of the path table that chose it\n"
            "  --device DEVICE    --paths and --plan for this backend's path table: host\n"
            "                     (default), cuda, cuda-p2p or hexagon (no device needed)\n"
            "  --sizes LIST       message sizes to show the allreduce path of, in bytes with\n"
            "                     K/M/G suffixes (default %s)\n"
            "  -n, --ranks RANKS  local ranks of the communicator asked about (1 to %d,\n"
            "                     COMM_MAX_RANKS; default 2)\n"
            "  --topology FILE    load the hwloc topology from this XML file (as HWLOC_XMLFILE\n"
            "                     does); the runtime's automatic knobs then follow it too\n"
            "  --only SECTIONS    print only these, comma-separated: host, topology, pci, cuda,\n"
            "                     hexagon, transports, paths, config\n"
            "  --no-host          leave out the host section (host name, OS, CPU model)\n"
            "  -h, --help         this text\n"
            "  --version          arinfo's and the library's version\n"
            "\n"
            "The text is wrapped to COLUMNS, else to the terminal's width, else to 80\n"
            "columns.  Without --config or --only it shows every section but the knobs\n"
            "and the path tables.\n"
            "\n"
            "Exit status: 0; 1 when the topology cannot be loaded; 2 on a usage error or a\n"
            "malformed ARCOMM_* variable.\n",
            default_sizes, COMM_MAX_RANKS);
}

static void die_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "arinfo: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nrun arinfo --help for the options\n");
    exit(2);
}

static unsigned parse_sections(const char *list)
{
    unsigned bits = 0;
    char buf[256];
    if (strlen(list) >= sizeof(buf))
        die_usage("--only \"%s\": too long", list);
    strcpy(buf, list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < N_SECTIONS; i++)
            if (strcmp(tok, section_names[i].name) == 0)
                break;
        if (i == N_SECTIONS)
            die_usage("--only: no section \"%s\" (host, topology, pci, cuda, hexagon, "
                      "transports, paths, config)",
                      tok);
        bits |= section_names[i].bit;
    }
    if (bits == 0)
        die_usage("--only \"%s\": names no section", list);
    return bits;
}

static void parse_sizes(struct arinfo *ai, const char *list)
{
    char buf[1024];
    if (strlen(list) >= sizeof(buf))
        die_usage("--sizes \"%.64s...\": too long", list);
    strcpy(buf, list);
    ai->nsizes = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t v;
        /* "off" and "auto" parse as sizes for knobs but are no message size. */
        if (!rt_parse_size(tok, &v) || v == RT_SIZE_OFF || v == RT_SIZE_AUTO)
            die_usage("--sizes: \"%s\" is not a size (bytes such as 4096, 64K, 1M, 2G)", tok);
        if (ai->nsizes == ARINFO_MAX_SIZES)
            die_usage("--sizes: more than %s sizes", "64");
        ai->sizes[ai->nsizes++] = v;
    }
    if (ai->nsizes == 0)
        die_usage("--sizes \"%s\": names no size", list);
}

/* --device NAME: the table --paths and --plan show. */
static void parse_device(struct arinfo *ai, const char *name)
{
    static const struct {
        const char *name;
        int ranks;
    } devices[] = {
        {"host", COMM_PATHS_RANKS_DEFAULT},
        {"cuda", COMM_PATHS_CUDA},
        {"cuda-p2p", COMM_PATHS_CUDA_P2P},
        {"hexagon", COMM_PATHS_HEXAGON},
    };
    for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
        if (strcmp(name, devices[i].name) == 0) {
            ai->device = i == 0 ? NULL : devices[i].name;
            ai->device_ranks = devices[i].ranks;
            return;
        }
    }
    die_usage("--device \"%s\": use host, cuda, cuda-p2p or hexagon", name);
}

static int parse_ranks(const char *text)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1)
        die_usage("-n \"%s\": expected a number of ranks from 1 to " COMM_MAX_RANKS_TEXT, text);
    /* Beyond it comm_init refuses: no transport serves such a communicator. */
    if (v > COMM_MAX_RANKS)
        die_usage("-n %s: a communicator has at most " COMM_MAX_RANKS_TEXT
                  " ranks (COMM_MAX_RANKS); comm_init would refuse more",
                  text);
    return (int)v;
}

static void print_header(struct arinfo *ai)
{
    bool numa = ARCOMM_HAVE_NUMA, cuda = ARCOMM_HAVE_CUDA, hexagon = ARCOMM_HAVE_HEXAGON;
    if (ai->json) {
        json_string(&ai->js, "schema", ARINFO_SCHEMA);
        json_string(&ai->js, "arcomm_version", ARCOMM_VERSION_STRING);
        json_object_begin(&ai->js, "build");
        json_bool(&ai->js, "numa", numa);
        json_bool(&ai->js, "cuda", cuda);
        json_bool(&ai->js, "hexagon", hexagon);
        json_object_end(&ai->js);
        json_int(&ai->js, "nranks", ai->nranks);
        return;
    }
    fprintf(ai->out, "arcomm %s (arinfo); built with libnuma %s, CUDA %s, Hexagon %s\n",
            ARCOMM_VERSION_STRING, numa ? "yes" : "no", cuda ? "yes" : "no",
            hexagon ? "yes" : "no");
    ai->text_started = true;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"config", no_argument, NULL, 'c'},
        {"sizes", required_argument, NULL, 's'},
        {"ranks", required_argument, NULL, 'n'},
        {"topology", required_argument, NULL, 't'},
        {"only", required_argument, NULL, 'o'},
        {"no-host", no_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {"paths", no_argument, NULL, 'p'},
        {"plan", required_argument, NULL, 'P'},
        {"version", no_argument, NULL, 'V'},
        {"device", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    struct arinfo ai = {.nranks = 2, .out = stdout};
    bool config = false, no_host = false, paths = false;
    unsigned only = 0;
    const char *sizes = default_sizes;
    int opt;
    while ((opt = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'j':
            ai.json = true;
            break;
        case 'c':
            config = true;
            break;
        case 's':
            sizes = optarg;
            break;
        case 'n':
            ai.nranks = parse_ranks(optarg);
            break;
        case 't':
            ai.topology_file = optarg;
            break;
        case 'o':
            only |= parse_sections(optarg);
            break;
        case 'H':
            no_host = true;
            break;
        case 'p':
            paths = true;
            break;
        case 'P':
            ai.plan_coll = optarg;
            break;
        case 'D':
            parse_device(&ai, optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V': {
            int major, minor, patch;
            comm_get_version(&major, &minor, &patch);
            printf("arinfo %s (libarcomm %d.%d.%d)\n", ARCOMM_VERSION_STRING, major, minor, patch);
            return 0;
        }
        default:
            usage(stderr);
            return 2;
        }
    }
    if (ai.plan_coll != NULL) {
        /* --plan COLL SIZE: the size is the one argument left. */
        if (optind >= argc)
            die_usage("--plan %s: give a size too, e.g. --plan allreduce 1M", ai.plan_coll);
        if (!rt_parse_size(argv[optind], &ai.plan_bytes) || ai.plan_bytes >= RT_SIZE_AUTO)
            die_usage("--plan: \"%s\" is no size (bytes with K/M/G suffixes)", argv[optind]);
        optind++;
    }
    if (optind < argc)
        die_usage("unexpected argument \"%s\"", argv[optind]);
    parse_sizes(&ai, sizes);

    /* Text shows the host by default, the knobs and the path tables on request (as
     * ucx_info -c); JSON is for programs, so it carries everything unless --only
     * narrows it. */
    ai.sections = only ? only : ARINFO_SEC_ALL & ~(ARINFO_SEC_CONFIG | ARINFO_SEC_PATHS);
    if (ai.json && !only)
        ai.sections |= ARINFO_SEC_CONFIG | ARINFO_SEC_PATHS;
    if (config)
        ai.sections = ai.json ? ai.sections | ARINFO_SEC_CONFIG : ARINFO_SEC_CONFIG;
    if (paths)
        ai.sections |= ARINFO_SEC_PATHS;
    if (no_host)
        ai.sections &= ~ARINFO_SEC_HOST;
    /* --plan alone shows the plan, as --config alone shows the knobs. */
    if (ai.plan_coll != NULL)
        ai.sections = (only || paths || config || ai.json ? ai.sections : 0) | ARINFO_SEC_PLAN;

    /* The runtime loads its own topology (for the automatic knobs) through hwloc's
     * environment, so a topology given here must reach it too, before it loads. */
    if (ai.topology_file != NULL && setenv("HWLOC_XMLFILE", ai.topology_file, 1) != 0) {
        fprintf(stderr, "arinfo: setenv HWLOC_XMLFILE: %s\n", strerror(errno));
        return 1;
    }
    /* The golden tests: the streaming-store threshold must not depend on this machine's
     * timing (the library itself has no such switch). */
    if (getenv("ARINFO_NO_CALIBRATION") != NULL) {
        coll_nt_calibration_skip();
        shm_cma_calibration_skip();
    }
    arinfo_knobs_load(&ai);
    arinfo_warn_unknown_env(&ai);
    /* A topology file given is always loaded: the runtime's fallback for one it cannot
     * load (one core) would otherwise show in the paths as if it were the file's. */
    if (ai.topology_file != NULL ||
        (ai.sections & (ARINFO_SEC_HOST | ARINFO_SEC_TOPOLOGY | ARINFO_SEC_PCI | ARINFO_SEC_CUDA |
                        ARINFO_SEC_HEXAGON))) {
        if (arinfo_topo_load(&ai) != 0)
            return 1;
    }

    /* Text goes to a buffer first, to be wrapped to the terminal at the end. */
    char *text = NULL;
    size_t text_len = 0;
    if (!ai.json) {
        ai.width = arinfo_width();
        ai.out = open_memstream(&text, &text_len);
        if (ai.out == NULL) {
            fprintf(stderr, "arinfo: open_memstream: %s\n", strerror(errno));
            return 1;
        }
    }
    if (ai.json) {
        json_init(&ai.js, ai.out);
        json_object_begin(&ai.js, NULL);
    }
    if (!(!ai.json && (ai.sections == ARINFO_SEC_CONFIG || ai.sections == ARINFO_SEC_PLAN)))
        print_header(&ai);
    if (ai.sections & ARINFO_SEC_HOST)
        print_host(&ai);
    if (ai.sections & ARINFO_SEC_TOPOLOGY)
        print_topology(&ai);
    if (ai.sections & ARINFO_SEC_PCI)
        print_pci(&ai);
    if (ai.sections & ARINFO_SEC_CUDA)
        print_cuda(&ai);
    if (ai.sections & ARINFO_SEC_HEXAGON)
        print_hexagon(&ai);
    if (ai.sections & ARINFO_SEC_TRANSPORTS)
        print_transports(&ai);
    if (ai.sections & ARINFO_SEC_PATHS) {
        if (ai.device != NULL)
            print_device_paths(&ai);
        else
            print_paths(&ai);
    }
    if (ai.sections & ARINFO_SEC_CONFIG)
        print_config(&ai);
    if (ai.sections & ARINFO_SEC_PLAN) {
        if (ai.device != NULL)
            print_device_plan(&ai);
        else
            print_plan(&ai);
    }
    if (ai.json) {
        json_object_end(&ai.js);
        json_finish(&ai.js);
    }

    if (ai.topo != NULL)
        hwloc_topology_destroy(ai.topo);
    for (size_t i = 0; i < ai.unknown_count; i++)
        free(ai.unknown_env[i]);
    free(ai.unknown_env);
    if (!ai.json) {
        if (fclose(ai.out) != 0) {
            fprintf(stderr, "arinfo: out of memory for the text\n");
            return 1;
        }
        ai.out = stdout;
        arinfo_wrap_write(stdout, text, text_len, ai.width);
        free(text);
    }
    if (fflush(ai.out) != 0 || ferror(ai.out)) {
        fprintf(stderr, "arinfo: writing the output: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
