/* SPDX-License-Identifier: MIT */
/*
 * PCI accelerators: GPUs (display controller classes) and NPUs (processing
 * accelerators, Qualcomm's AI parts), with the NUMA nodes they are local to: where a
 * rank driving that device should run and keep its staging memory.
 */
#include "arinfo.h"

#include <stdlib.h>
#include <string.h>

enum accel_kind { ACCEL_NONE, ACCEL_GPU, ACCEL_NPU };

#define PCI_VENDOR_QUALCOMM 0x17cb

static enum accel_kind classify(const struct hwloc_pcidev_attr_s *p)
{
    unsigned base = p->class_id >> 8;
    switch (p->class_id) {
    case 0x0300: /* VGA compatible controller */
    case 0x0302: /* 3D controller: NVIDIA datacenter parts */
    case 0x0380: /* display controller: AMD Instinct parts */
        return ACCEL_GPU;
    default:
        break;
    }
    if (base == 0x12) /* processing accelerators */
        return ACCEL_NPU;
    /* Qualcomm AI parts that announce another class; its Wi-Fi (network) and bridges
     * share the vendor id and are no NPU. */
    if (p->vendor_id == PCI_VENDOR_QUALCOMM && base != 0x02 && base != 0x06 && base != 0x0c)
        return ACCEL_NPU;
    return ACCEL_NONE;
}

static const char *vendor_name(unsigned vendor_id)
{
    switch (vendor_id) {
    case 0x10de:
        return "NVIDIA";
    case 0x1002:
        return "AMD";
    case 0x8086:
        return "Intel";
    case PCI_VENDOR_QUALCOMM:
        return "Qualcomm";
    default:
        return NULL;
    }
}

static const char *class_name(unsigned class_id)
{
    switch (class_id) {
    case 0x0300:
        return "VGA controller";
    case 0x0302:
        return "3D controller";
    case 0x0380:
        return "display controller";
    case 0x1200:
        return "processing accelerator";
    default:
        return (class_id >> 8) == 0x12 ? "processing accelerator" : "other";
    }
}

static void busid(const struct hwloc_pcidev_attr_s *p, char *buf, size_t len)
{
    snprintf(buf, len, "%04x:%02x:%02x.%01x", p->domain, p->bus, p->dev, p->func);
}

/* The first non-I/O ancestor: the package, group or machine the device hangs off. */
static hwloc_obj_t locality(struct arinfo *ai, hwloc_obj_t dev)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(ai->topo, dev);
    if (anc == NULL || anc->nodeset == NULL || hwloc_bitmap_iszero(anc->nodeset))
        return NULL;
    return anc;
}

static hwloc_obj_t pcidev_of(struct arinfo *ai, const char *id);

hwloc_const_bitmap_t arinfo_pci_numa(struct arinfo *ai, const char *id)
{
    hwloc_obj_t o = pcidev_of(ai, id);
    if (o == NULL)
        return NULL;
    hwloc_obj_t anc = locality(ai, o);
    return anc ? anc->nodeset : NULL;
}

static void os_devices_text(FILE *f, hwloc_obj_t dev)
{
    bool first = true;
    for (hwloc_obj_t c = dev->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL)
            continue;
        fputs(first ? ", os devices: " : " ", f);
        arinfo_put_clean(f, c->name);
        first = false;
    }
}

/* index: the GPU's number in the link matrix (GPU0, GPU1, ...), -1 for an NPU. */
static void device_text(struct arinfo *ai, hwloc_obj_t o, enum accel_kind kind, int index)
{
    const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;
    FILE *f = ai->out;
    char id[32];
    busid(p, id, sizeof(id));
    const char *vendor = vendor_name(p->vendor_id);
    const char *pci_vendor = hwloc_obj_get_info_by_name(o, "PCIVendor");
    const char *name = hwloc_obj_get_info_by_name(o, "PCIDevice");
    if (kind == ACCEL_GPU)
        fprintf(f, "  GPU%d %s: ", index, id);
    else
        fprintf(f, "  NPU %s: ", id);
    arinfo_put_clean(f, vendor ? vendor : pci_vendor ? pci_vendor : "unknown vendor");
    fprintf(f, " [%04x:%04x]", p->vendor_id, p->device_id);
    if (name != NULL) {
        fputc(' ', f);
        arinfo_put_clean(f, name);
    }
    fprintf(f, "\n      class %04x (%s)", p->class_id, class_name(p->class_id));
    hwloc_obj_t anc = locality(ai, o);
    if (anc != NULL) {
        char nodes[64], cpus[256];
        hwloc_bitmap_list_snprintf(nodes, sizeof(nodes), anc->nodeset);
        hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), anc->cpuset);
        fprintf(f, ", NUMA node%s %s (PUs %s)", hwloc_bitmap_weight(anc->nodeset) > 1 ? "s" : "",
                nodes, cpus);
    } else {
        fprintf(f, ", NUMA locality unknown");
    }
    if (p->linkspeed > 0)
        fprintf(f, ", link %.1f GB/s", p->linkspeed);
    os_devices_text(f, o);
    fputc('\n', f);
}

static void device_json(struct arinfo *ai, hwloc_obj_t o, enum accel_kind kind)
{
    const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;
    struct json *js = &ai->js;
    char id[32], hex[8];
    busid(p, id, sizeof(id));
    json_object_begin(js, NULL);
    json_string(js, "kind", kind == ACCEL_GPU ? "gpu" : "npu");
    json_string(js, "bus_id", id);
    snprintf(hex, sizeof(hex), "%04x", p->class_id);
    json_string(js, "class_id", hex);
    json_string(js, "class_name", class_name(p->class_id));
    snprintf(hex, sizeof(hex), "%04x", p->vendor_id);
    json_string(js, "vendor_id", hex);
    snprintf(hex, sizeof(hex), "%04x", p->device_id);
    json_string(js, "device_id", hex);
    snprintf(hex, sizeof(hex), "%04x", p->subvendor_id);
    json_string(js, "subvendor_id", hex);
    snprintf(hex, sizeof(hex), "%04x", p->subdevice_id);
    json_string(js, "subdevice_id", hex);
    snprintf(hex, sizeof(hex), "%02x", p->revision);
    json_string(js, "revision", hex);
    json_string(js, "vendor", vendor_name(p->vendor_id));
    json_string(js, "pci_vendor_name", hwloc_obj_get_info_by_name(o, "PCIVendor"));
    json_string(js, "name", hwloc_obj_get_info_by_name(o, "PCIDevice"));
    hwloc_obj_t anc = locality(ai, o);
    json_array_begin_inline(js, "numa_nodes");
    if (anc != NULL) {
        int i;
        hwloc_bitmap_foreach_begin(i, anc->nodeset) json_int(js, NULL, i);
        hwloc_bitmap_foreach_end();
    }
    json_array_end(js);
    if (anc != NULL) {
        char cpus[256];
        hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), anc->cpuset);
        json_string(js, "local_cpus", cpus);
    } else {
        json_null(js, "local_cpus");
    }
    if (p->linkspeed > 0)
        json_double(js, "link_gbytes_per_s", p->linkspeed, 2);
    else
        json_null(js, "link_gbytes_per_s");
    json_array_begin_inline(js, "os_devices");
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c->name != NULL)
            json_string(js, NULL, c->name);
    json_array_end(js);
    json_object_end(js);
}

/* Bridges from dev up to (not counting) anc. */
static int bridges_below(hwloc_obj_t dev, hwloc_obj_t anc)
{
    int n = 0;
    for (hwloc_obj_t o = dev->parent; o != NULL && o != anc; o = o->parent)
        n += o->type == HWLOC_OBJ_BRIDGE;
    return n;
}

/*
 * What lies between two PCI devices, in nvidia-smi topo -m's words: PIX (one PCIe
 * switch or bridge), PXB (several, short of the host bridge), PHB (a host bridge), NODE
 * (host bridges of one NUMA node), SYS (across NUMA nodes).
 */
static const char *pci_link(struct arinfo *ai, hwloc_obj_t a, hwloc_obj_t b)
{
    /* Not hwloc_get_common_ancestor_obj: it climbs by depth, and I/O objects have none
     * (bridges, PCI devices: special negative depths). */
    hwloc_obj_t anc = NULL;
    for (hwloc_obj_t x = a->parent; x != NULL && anc == NULL; x = x->parent)
        for (hwloc_obj_t y = b->parent; y != NULL; y = y->parent)
            if (x == y) {
                anc = x;
                break;
            }
    if (anc != NULL && anc->type == HWLOC_OBJ_BRIDGE) {
        if (anc->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
            return "PHB";
        /* A switch is its upstream port over its downstream ports: one switch. */
        return bridges_below(a, anc) <= 1 && bridges_below(b, anc) <= 1 ? "PIX" : "PXB";
    }
    hwloc_obj_t la = locality(ai, a), lb = locality(ai, b);
    if (la != NULL && lb != NULL && hwloc_bitmap_isequal(la->nodeset, lb->nodeset) &&
        hwloc_bitmap_weight(la->nodeset) == 1)
        return "NODE";
    return "SYS";
}

static hwloc_obj_t pcidev_of(struct arinfo *ai, const char *id)
{
    unsigned dom, bus, dev, fn;
    if (ai->topo == NULL || sscanf(id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return NULL;
    return hwloc_get_pcidev_by_busid(ai->topo, dom, bus, dev, fn);
}

const char *arinfo_pci_link(struct arinfo *ai, const char *busid_a, const char *busid_b)
{
    hwloc_obj_t a = pcidev_of(ai, busid_a), b = pcidev_of(ai, busid_b);
    return a != NULL && b != NULL && a != b ? pci_link(ai, a, b) : NULL;
}

/* The GPUs' link matrix, as nvidia-smi topo -m prints it, from hwloc's PCI tree. */
static void gpu_matrix_text(struct arinfo *ai, int gpus)
{
    hwloc_obj_t *dev = calloc((size_t)gpus, sizeof(*dev));
    if (dev == NULL)
        return;
    int n = 0;
    for (hwloc_obj_t o = NULL; n < gpus && (o = hwloc_get_next_pcidev(ai->topo, o)) != NULL;)
        if (classify(&o->attr->pcidev) == ACCEL_GPU)
            dev[n++] = o;
    FILE *f = ai->out;
    fprintf(f, "  GPU links (from the PCI tree; the CUDA section shows NVLink):\n");
    fprintf(f, "  %-6s", "");
    for (int j = 0; j < n; j++)
        fprintf(f, " GPU%-3d", j);
    fprintf(f, " NUMA\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "  GPU%-3d", i);
        for (int j = 0; j < n; j++)
            fprintf(f, " %-6s", i == j ? "X" : pci_link(ai, dev[i], dev[j]));
        hwloc_obj_t anc = locality(ai, dev[i]);
        char nodes[64] = "?";
        if (anc != NULL)
            hwloc_bitmap_list_snprintf(nodes, sizeof(nodes), anc->nodeset);
        fprintf(f, " %s\n", nodes);
    }
    fprintf(f, "  X = self; PIX = through one PCIe switch; PXB = through several PCIe switches; "
               "PHB = through a PCIe host bridge; NODE = between host bridges of one NUMA "
               "node; SYS = across NUMA nodes\n");
    free(dev);
}

void print_pci(struct arinfo *ai)
{
    int gpus = 0, npus = 0, pcidevs = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(ai->topo, o)) != NULL;) {
        pcidevs++;
        enum accel_kind k = classify(&o->attr->pcidev);
        gpus += k == ACCEL_GPU;
        npus += k == ACCEL_NPU;
    }
    if (ai->json)
        json_array_begin(&ai->js, "pci_accelerators");
    else
        arinfo_title(ai, "PCI accelerators (%d GPU%s, %d NPU%s, of %d PCI devices)", gpus,
                     gpus == 1 ? "" : "s", npus, npus == 1 ? "" : "s", pcidevs);
    /* GPUs first (GPU0, GPU1, ... in the text), then NPUs, each in bus order (hwloc's
     * order). */
    int index = 0;
    for (enum accel_kind want = ACCEL_GPU; want <= ACCEL_NPU; want++) {
        for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(ai->topo, o)) != NULL;) {
            if (classify(&o->attr->pcidev) != want)
                continue;
            if (ai->json)
                device_json(ai, o, want);
            else
                device_text(ai, o, want, want == ACCEL_GPU ? index++ : -1);
        }
    }
    if (!ai->json && gpus > 1)
        gpu_matrix_text(ai, gpus);
    if (ai->json)
        json_array_end(&ai->js);
    else if (pcidevs == 0)
        fprintf(ai->out, "  none: hwloc found no PCI device (no /sys/bus/pci in a container?)\n");
    else if (gpus + npus == 0)
        fprintf(ai->out, "  none\n");
}
