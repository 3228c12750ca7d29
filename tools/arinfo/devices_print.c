/* SPDX-License-Identifier: MIT */
/*
 * The CUDA and Hexagon sections' output.  The data comes from cuda_section.c and
 * hexagon_section.c; the layout lives here, apart, so that filling in a transport's
 * query never touches what the JSON schema promises.
 */
#include "devices.h"

#include <string.h>

static const char *link_name(enum arinfo_link l, bool self)
{
    if (self)
        return "self";
    switch (l) {
    case ARINFO_LINK_PCIE:
        return "pcie";
    case ARINFO_LINK_NVLINK:
        return "nvlink";
    default:
        return "none";
    }
}

static void numa_json(struct arinfo *ai, const char *busid)
{
    hwloc_const_bitmap_t nodes = arinfo_pci_numa(ai, busid);
    json_array_begin_inline(&ai->js, "numa_nodes");
    if (nodes != NULL) {
        int i;
        hwloc_bitmap_foreach_begin(i, nodes) json_int(&ai->js, NULL, i);
        hwloc_bitmap_foreach_end();
    }
    json_array_end(&ai->js);
}

static void cuda_json(struct arinfo *ai, const struct arinfo_cuda *c)
{
    struct json *js = &ai->js;
    json_object_begin(js, "cuda");
    json_bool(js, "built", c->built);
    json_string(js, "note", c->ndevices ? NULL : c->note);
    json_array_begin(js, "devices");
    for (int i = 0; i < c->ndevices; i++) {
        const struct arinfo_cuda_device *d = &c->dev[i];
        char cc[16];
        snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
        json_object_begin(js, NULL);
        json_int(js, "ordinal", d->ordinal);
        json_string(js, "name", d->name);
        json_string(js, "bus_id", d->bus_id);
        json_uint(js, "memory_bytes", d->memory_bytes);
        json_string(js, "compute_capability", cc);
        numa_json(ai, d->bus_id);
        json_object_end(js);
    }
    json_array_end(js);
    json_array_begin(js, "peer_links");
    for (int i = 0; i < c->ndevices; i++) {
        json_array_begin_inline(js, NULL);
        for (int j = 0; j < c->ndevices; j++)
            json_string(js, NULL, link_name(c->link[i][j], i == j));
        json_array_end(js);
    }
    json_array_end(js);
    json_object_end(js);
}

void arinfo_cuda_print(struct arinfo *ai, const struct arinfo_cuda *c)
{
    if (ai->json) {
        cuda_json(ai, c);
        return;
    }
    FILE *f = ai->out;
    if (c->ndevices == 0) {
        arinfo_title(ai, "CUDA");
        fprintf(f, "  no CUDA devices (%s)\n", c->note);
        return;
    }
    arinfo_title(ai, "CUDA (%d device%s)", c->ndevices, c->ndevices == 1 ? "" : "s");
    for (int i = 0; i < c->ndevices; i++) {
        const struct arinfo_cuda_device *d = &c->dev[i];
        char mem[32], nodes[64] = "unknown";
        arinfo_fmt_bytes(d->memory_bytes, mem, sizeof(mem));
        hwloc_const_bitmap_t set = arinfo_pci_numa(ai, d->bus_id);
        if (set != NULL)
            hwloc_bitmap_list_snprintf(nodes, sizeof(nodes), set);
        char name[16];
        snprintf(name, sizeof(name), "cuda%d", d->ordinal);
        fprintf(f, "  %-8s%s  ", name, d->bus_id);
        arinfo_put_clean(f, d->name);
        fprintf(f, ", %s, sm_%d%d, NUMA node %s\n", mem, d->cc_major, d->cc_minor, nodes);
    }
    /* The matrix, as nvidia-smi topo -m's: NVLink, else what the PCI tree puts between
     * the two (hwloc), marked when the row's GPU has no peer access to the column's. */
    fprintf(f, "  links (row to column): NV = NVLink; else as in the PCI section (PIX, PXB, "
               "PHB, NODE, SYS; PCI where hwloc does not know the GPUs); * = no peer access "
               "(copies go through host memory)\n");
    fprintf(f, "  %-8s", "");
    for (int j = 0; j < c->ndevices; j++) {
        char name[16];
        snprintf(name, sizeof(name), "cuda%d", c->dev[j].ordinal);
        /* No trailing blanks: golden files compare whole lines. */
        fprintf(f, j + 1 < c->ndevices ? " %-7s" : " %s", name);
    }
    fputc('\n', f);
    for (int i = 0; i < c->ndevices; i++) {
        char name[16];
        snprintf(name, sizeof(name), "cuda%d", c->dev[i].ordinal);
        fprintf(f, "  %-8s", name);
        for (int j = 0; j < c->ndevices; j++) {
            char cell[16];
            const char *pci = arinfo_pci_link(ai, c->dev[i].bus_id, c->dev[j].bus_id);
            if (i == j)
                snprintf(cell, sizeof(cell), "X");
            else if (c->link[i][j] == ARINFO_LINK_NVLINK)
                snprintf(cell, sizeof(cell), "NV");
            else
                snprintf(cell, sizeof(cell), "%s%s", pci ? pci : "PCI",
                         c->link[i][j] == ARINFO_LINK_NONE ? "*" : "");
            fprintf(f, j + 1 < c->ndevices ? " %-7s" : " %s", cell);
        }
        fputc('\n', f);
    }
}

void arinfo_hexagon_print(struct arinfo *ai, const struct arinfo_hexagon *h)
{
    if (ai->json) {
        struct json *js = &ai->js;
        json_object_begin(js, "hexagon");
        json_bool(js, "built", h->built);
        if (h->built) {
            json_bool(js, "emulated", h->emulated);
            json_bool(js, "rpcmem", h->rpcmem);
            json_bool(js, "dma_heap", h->dma_heap);
            json_bool(js, "cross_v69", h->cross_v69);
            json_bool(js, "qemu_v67", h->qemu_v67);
            json_bool(js, "sdk", h->sdk);
            json_string(js, "vsum", h->vsum);
        } else {
            json_null(js, "emulated");
        }
        json_string(js, "note", h->nsessions ? NULL : h->note);
        json_array_begin(js, "sessions");
        for (int i = 0; i < h->nsessions; i++) {
            const struct arinfo_hex_session *s = &h->s[i];
            json_object_begin(js, NULL);
            json_int(js, "index", s->index);
            json_string(js, "arch", s->arch);
            json_uint(js, "vtcm_bytes", s->vtcm_bytes);
            json_int(js, "hvx_threads", s->hvx_threads);
            json_object_end(js);
        }
        json_array_end(js);
        json_object_end(js);
        return;
    }
    FILE *f = ai->out;
    if (!h->built) {
        arinfo_title(ai, "Hexagon: not built (%s)", h->note);
        return;
    }
    if (h->nsessions == 0) {
        arinfo_title(ai, "Hexagon%s", h->emulated ? " (host emulation)" : "");
        fprintf(f, "  %s\n", h->note);
        fprintf(f, "  buffers: rpcmem %s, dma-heap %s, memfd yes\n", h->rpcmem ? "yes" : "no",
                h->dma_heap ? "yes" : "no");
        fprintf(f,
                "  DSP code: v69 HVX cross-build %s, v67 under qemu-hexagon %s, SDK %s; "
                "sums: %s\n",
                h->cross_v69 ? "yes" : "no", h->qemu_v67 ? "yes" : "no", h->sdk ? "yes" : "no",
                h->vsum);
        return;
    }
    arinfo_title(ai, "Hexagon (%d session%s%s)", h->nsessions, h->nsessions == 1 ? "" : "s",
                 h->emulated ? ", host emulation" : "");
    for (int i = 0; i < h->nsessions; i++) {
        const struct arinfo_hex_session *s = &h->s[i];
        char vtcm[32];
        arinfo_fmt_bytes(s->vtcm_bytes, vtcm, sizeof(vtcm));
        fprintf(f, "  session %d: ", s->index);
        arinfo_put_clean(f, s->arch);
        fprintf(f, ", VTCM %s, %d HVX thread%s\n", vtcm, s->hvx_threads,
                s->hvx_threads == 1 ? "" : "s");
    }
}
