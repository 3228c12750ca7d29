/* SPDX-License-Identifier: MIT */
/*
 * GPUs as hwloc sees them: each CUDA ordinal's PCI bus id, matched to hwloc's PCI
 * object with that bus id (class 0x0302 or 0x0300, vendor 0x10de), and the NUMA node
 * nearest to it.  arinfo prints this; setup logs it at info level.
 */
#include "cuda_comm.h"

#include <hwloc.h>
#include <stdio.h>
#include <string.h>

static int numa_of(hwloc_topology_t topo, hwloc_obj_t pci)
{
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(topo, pci);
    if (a == NULL || a->nodeset == NULL || hwloc_bitmap_weight(a->nodeset) != 1)
        return -1;
    return hwloc_bitmap_first(a->nodeset);
}

int cuda_topo_list(struct cuda_gpu_info *info, int max)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    hwloc_topology_t topo = NULL;
    bool have_topo = hwloc_topology_init(&topo) == 0;
    if (have_topo) {
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        if (hwloc_topology_load(topo) != 0) {
            hwloc_topology_destroy(topo);
            have_topo = false;
        }
    }
    int count = n < max ? n : max;
    for (int i = 0; i < count; i++) {
        struct cuda_gpu_info *g = &info[i];
        memset(g, 0, sizeof(*g));
        g->ordinal = i;
        g->numa_node = -1;
        if (cudaDeviceGetPCIBusId(g->busid, (int)sizeof(g->busid), i) != cudaSuccess)
            snprintf(g->busid, sizeof(g->busid), "?");
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
            snprintf(g->name, sizeof(g->name), "%.127s", prop.name);
        (void)cudaGetLastError();
        if (!have_topo)
            continue;
        hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, g->busid);
        if (pci == NULL)
            continue;
        g->hwloc_found = true;
        g->vendor = pci->attr->pcidev.vendor_id;
        g->device_id = pci->attr->pcidev.device_id;
        g->pci_class = pci->attr->pcidev.class_id;
        g->numa_node = numa_of(topo, pci);
    }
    if (have_topo)
        hwloc_topology_destroy(topo);
    return count;
}
