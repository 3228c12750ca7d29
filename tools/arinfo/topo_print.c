/* SPDX-License-Identifier: MIT */
/*
 * The host, the hwloc tree and the PCI accelerators.  arinfo loads its own topology,
 * with PCI and OS devices, apart from the runtime's (which leaves I/O out because a
 * communicator never needs it and discovering it is slow).
 */
#include "arinfo.h"
#include "topo_numa.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

int arinfo_topo_load(struct arinfo *ai)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        fprintf(stderr, "arinfo: hwloc_topology_init: %s\n", strerror(errno));
        return -1;
    }
    /* PCI devices, the bridges above them and the OS devices below them (cuda0, ...). */
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* Every PCI device, not only the classes this hwloc deems important: an accelerator
     * class it does not know yet must not vanish from the list. */
    hwloc_topology_set_type_filter(t, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (ai->topology_file != NULL) {
        /* hwloc does not always set errno (it then reads "Success"): look first. */
        FILE *f = fopen(ai->topology_file, "r");
        if (f == NULL) {
            fprintf(stderr, "arinfo: cannot open topology file %s: %s\n", ai->topology_file,
                    strerror(errno));
            hwloc_topology_destroy(t);
            return -1;
        }
        fclose(f);
        errno = 0;
        if (hwloc_topology_set_xml(t, ai->topology_file) != 0 || hwloc_topology_load(t) != 0) {
            fprintf(stderr,
                    "arinfo: cannot load topology file %s: hwloc does not read it as a "
                    "topology%s%s; give an XML file written by lstopo (lstopo FILE.xml)\n",
                    ai->topology_file, errno != 0 && errno != EINVAL ? ": " : "",
                    errno != 0 && errno != EINVAL ? strerror(errno) : "");
            hwloc_topology_destroy(t);
            return -1;
        }
    } else {
        errno = 0;
        if (hwloc_topology_load(t) != 0) {
            fprintf(stderr, "arinfo: hwloc cannot discover this host's topology%s%s\n",
                    errno != 0 ? ": " : "", errno != 0 ? strerror(errno) : "");
            hwloc_topology_destroy(t);
            return -1;
        }
    }
    ai->topo = t;
    return 0;
}

/* Host facts come from the topology's info attributes (so that a topology loaded from
 * XML describes its own machine), and from uname only when it is this machine. */
static const char *host_info(struct arinfo *ai, const char *name)
{
    return hwloc_obj_get_info_by_name(hwloc_get_root_obj(ai->topo), name);
}

static const char *cpu_info(struct arinfo *ai, const char *name)
{
    hwloc_obj_t pkg = hwloc_get_obj_by_type(ai->topo, HWLOC_OBJ_PACKAGE, 0);
    const char *v = pkg ? hwloc_obj_get_info_by_name(pkg, name) : NULL;
    return v ? v : host_info(ai, name);
}

void print_host(struct arinfo *ai)
{
    struct utsname u;
    bool local = hwloc_topology_is_thissystem(ai->topo) && uname(&u) == 0;
    const char *name = host_info(ai, "HostName");
    const char *os = host_info(ai, "OSName");
    const char *release = host_info(ai, "OSRelease");
    const char *arch = host_info(ai, "Architecture");
    if (local) {
        name = name ? name : u.nodename;
        os = os ? os : u.sysname;
        release = release ? release : u.release;
        arch = arch ? arch : u.machine;
    }
    const char *vendor = cpu_info(ai, "CPUVendor");
    const char *model = cpu_info(ai, "CPUModel");

    if (ai->json) {
        json_object_begin(&ai->js, "host");
        json_string(&ai->js, "name", name);
        json_string(&ai->js, "os", os);
        json_string(&ai->js, "os_release", release);
        json_string(&ai->js, "architecture", arch);
        json_string(&ai->js, "cpu_vendor", vendor);
        json_string(&ai->js, "cpu_model", model);
        json_object_end(&ai->js);
        return;
    }
    FILE *f = ai->out;
    arinfo_title(ai, "Host");
    fprintf(f, "  name          ");
    arinfo_put_clean(f, name ? name : "unknown");
    fprintf(f, "\n  os            ");
    arinfo_put_clean(f, os ? os : "unknown");
    if (release) {
        fputc(' ', f);
        arinfo_put_clean(f, release);
    }
    fprintf(f, "\n  architecture  ");
    arinfo_put_clean(f, arch ? arch : "unknown");
    fprintf(f, "\n  cpu           ");
    if (vendor) {
        arinfo_put_clean(f, vendor);
        fputc(' ', f);
    }
    arinfo_put_clean(f, model ? model : vendor ? "" : "unknown");
    fputc('\n', f);
}

static int count(struct arinfo *ai, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(ai->topo, type);
    return n > 0 ? n : 0;
}

static const char *cache_kind(const hwloc_obj_t o)
{
    switch (o->attr->cache.type) {
    case HWLOC_OBJ_CACHE_DATA:
        return "data";
    case HWLOC_OBJ_CACHE_INSTRUCTION:
        return "instruction";
    default:
        return "unified";
    }
}

/* One object as text: "Package P#0", "L2 1 MiB", "NUMA node P#1: 32 GiB". */
static void obj_label(hwloc_obj_t o, char *buf, size_t len)
{
    char size[32];
    if (hwloc_obj_type_is_cache(o->type)) {
        const char *suffix = o->attr->cache.type == HWLOC_OBJ_CACHE_DATA          ? "d"
                             : o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION ? "i"
                                                                                  : "";
        arinfo_fmt_bytes(o->attr->cache.size, size, sizeof(size));
        snprintf(buf, len, "L%u%s %s", o->attr->cache.depth, suffix, size);
        return;
    }
    switch (o->type) {
    case HWLOC_OBJ_NUMANODE:
        arinfo_fmt_bytes(o->attr->numanode.local_memory, size, sizeof(size));
        snprintf(buf, len, "NUMA node P#%u: %s", o->os_index, size);
        return;
    case HWLOC_OBJ_MACHINE:
        arinfo_fmt_bytes(o->total_memory, size, sizeof(size));
        snprintf(buf, len, "Machine: %s", size);
        return;
    case HWLOC_OBJ_MEMCACHE:
        arinfo_fmt_bytes(o->attr->cache.size, size, sizeof(size));
        snprintf(buf, len, "MemCache %s", size);
        return;
    default:
        break;
    }
    if (o->os_index != HWLOC_UNKNOWN_INDEX)
        snprintf(buf, len, "%s P#%u", hwloc_obj_type_string(o->type), o->os_index);
    else
        snprintf(buf, len, "%s", hwloc_obj_type_string(o->type));
}

static bool children_all_pus(hwloc_obj_t o)
{
    if (o->arity == 0 || o->memory_arity != 0)
        return false;
    for (hwloc_obj_t c = o->first_child; c; c = c->next_sibling)
        if (c->type != HWLOC_OBJ_PU)
            return false;
    return true;
}

/*
 * Prints o and below, one line per object as lstopo does, except that a chain of
 * single children shares a line ("L2 1 MiB + L1d 32 KiB + Core P#0") and a core's
 * PUs are listed on its line: a 64-core machine still fits a screen or two.
 */
static void tree_text(struct arinfo *ai, hwloc_obj_t o, int depth)
{
    char line[512], label[128], cpus[256];
    size_t used = 0;
    for (;;) {
        obj_label(o, label, sizeof(label));
        used +=
            (size_t)snprintf(line + used, sizeof(line) - used, "%s%s", used ? " + " : "", label);
        if (used >= sizeof(line))
            used = sizeof(line) - 1;
        if (o->arity == 1 && o->memory_arity == 0 && o->first_child->type != HWLOC_OBJ_PU) {
            o = o->first_child;
            continue;
        }
        break;
    }
    fprintf(ai->out, "%*s", 2 + 2 * depth, "");
    arinfo_put_clean(ai->out, line);
    if (children_all_pus(o)) {
        hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), o->cpuset);
        fprintf(ai->out, ": PU%s %s\n", o->arity > 1 ? "s" : "", cpus);
        return;
    }
    fputc('\n', ai->out);
    for (hwloc_obj_t m = o->memory_first_child; m; m = m->next_sibling)
        tree_text(ai, m, depth + 1);
    for (hwloc_obj_t c = o->first_child; c; c = c->next_sibling)
        tree_text(ai, c, depth + 1);
}

static void tree_json(struct arinfo *ai, const char *key, hwloc_obj_t o)
{
    struct json *js = &ai->js;
    char cpus[256];
    json_object_begin(js, key);
    json_string(js, "type", hwloc_obj_type_string(o->type));
    if (o->os_index != HWLOC_UNKNOWN_INDEX)
        json_uint(js, "os_index", o->os_index);
    else
        json_null(js, "os_index");
    if (o->cpuset != NULL) {
        hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), o->cpuset);
        json_string(js, "cpus", cpus);
    }
    if (o->type == HWLOC_OBJ_NUMANODE)
        json_uint(js, "memory_bytes", o->attr->numanode.local_memory);
    if (hwloc_obj_type_is_cache(o->type) || o->type == HWLOC_OBJ_MEMCACHE) {
        json_object_begin(js, "cache");
        json_uint(js, "level", o->attr->cache.depth);
        json_string(js, "kind", cache_kind(o));
        json_uint(js, "size_bytes", o->attr->cache.size);
        json_uint(js, "line_bytes", o->attr->cache.linesize);
        json_object_end(js);
    }
    if (o->memory_arity > 0) {
        json_array_begin(js, "memory_children");
        for (hwloc_obj_t m = o->memory_first_child; m; m = m->next_sibling)
            tree_json(ai, NULL, m);
        json_array_end(js);
    }
    if (o->arity > 0) {
        json_array_begin(js, "children");
        for (hwloc_obj_t c = o->first_child; c; c = c->next_sibling)
            tree_json(ai, NULL, c);
        json_array_end(js);
    }
    json_object_end(js);
}

/* Which NUMA node each of the -n ranks falls in, placed one per core (arrun --bind core),
 * and whether the host paths' node plan (runtime/topo_numa.h) stages per node. */
static void numa_ranks_text(struct arinfo *ai)
{
    static int node[RT_MAX_RANKS];
    int n = ai->nranks;
    if (rt_topo_rank_nodes(ai->topo, n, node) < 2)
        return;
    static struct rt_numa_plan p;
    rt_numa_plan_make(node, n, &p);
    fprintf(ai->out, "  NUMA of %d ranks, one per core:", n);
    for (int m = 0; m < p.nodes; m++) {
        fprintf(ai->out, "%s node %d ranks ", m ? ";" : "", p.node_id[m]);
        for (int i = 0; i < p.size[m]; i++) {
            int r = p.members[p.first[m] + i], j = i;
            while (j + 1 < p.size[m] && p.members[p.first[m] + j + 1] == r + (j + 1 - i))
                j++;
            int last = p.members[p.first[m] + j];
            fprintf(ai->out, "%s%d", i ? "," : "", r);
            if (last != r)
                fprintf(ai->out, "-%d", last);
            i = j;
        }
    }
    fprintf(ai->out, "\n  node staging %s (all-gather crossings %llu, one per node %llu)\n",
            p.staged ? "pays" : "does not pay", (unsigned long long)p.flat_crossings,
            (unsigned long long)p.staged_crossings);
}

void print_topology(struct arinfo *ai)
{
    hwloc_obj_t root = hwloc_get_root_obj(ai->topo);
    bool local = hwloc_topology_is_thissystem(ai->topo);
    int pkgs = count(ai, HWLOC_OBJ_PACKAGE), nodes = count(ai, HWLOC_OBJ_NUMANODE);
    int cores = count(ai, HWLOC_OBJ_CORE), pus = count(ai, HWLOC_OBJ_PU);
    if (ai->json) {
        struct json *js = &ai->js;
        json_object_begin(js, "topology");
        json_bool(js, "this_system", local);
        json_int(js, "packages", pkgs);
        json_int(js, "numa_nodes", nodes);
        json_int(js, "cores", cores);
        json_int(js, "pus", pus);
        json_uint(js, "memory_bytes", root->total_memory);
        json_array_begin(js, "numa");
        for (int i = 0; i < nodes; i++) {
            hwloc_obj_t n = hwloc_get_obj_by_type(ai->topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
            char cpus[256];
            hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), n->cpuset);
            json_object_begin(js, NULL);
            json_uint(js, "os_index", n->os_index);
            json_uint(js, "memory_bytes", n->attr->numanode.local_memory);
            json_string(js, "cpus", cpus);
            json_object_end(js);
        }
        json_array_end(js);
        tree_json(ai, "tree", root);
        json_object_end(js);
        return;
    }
    char mem[32];
    arinfo_fmt_bytes(root->total_memory, mem, sizeof(mem));
    arinfo_title(ai, "Topology (hwloc, %s)",
                 local ? "this system" : "loaded from XML: not this system");
    fprintf(ai->out, "  %d package%s, %d NUMA node%s, %d core%s, %d PU%s, %s of memory\n", pkgs,
            pkgs == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s", cores, cores == 1 ? "" : "s", pus,
            pus == 1 ? "" : "s", mem);
    numa_ranks_text(ai);
    tree_text(ai, root, 0);
}
