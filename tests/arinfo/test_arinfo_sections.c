/* SPDX-License-Identifier: MIT */
/*
 * arinfo's pieces with made-up inputs: the JSON writer's escaping and layout, and the
 * CUDA and Hexagon sections with devices this machine does not have (their owners
 * fill in the queries; the output is fixed here).
 *
 *   test_arinfo_sections TOPOLOGY.xml
 */
#include "arinfo.h"
#include "devices.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static const char *xml_path;

/* Captures what the writer prints into a string. */
struct capture {
    char *buf;
    size_t len;
    FILE *f;
};

static void capture_begin(struct capture *c)
{
    c->buf = NULL;
    c->len = 0;
    c->f = open_memstream(&c->buf, &c->len);
    assert_non_null(c->f);
}

static char *capture_end(struct capture *c)
{
    fclose(c->f);
    return c->buf;
}

static void check_escape(const char *in, const char *want)
{
    struct capture c;
    capture_begin(&c);
    json_write_string(c.f, in);
    char *got = capture_end(&c);
    assert_string_equal(got, want);
    free(got);
}

static void json_escapes_everything(void **state)
{
    (void)state;
    check_escape("plain", "\"plain\"");
    check_escape("", "\"\"");
    check_escape("q\"b\\s/", "\"q\\\"b\\\\s/\"");
    check_escape("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
    check_escape("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
    /* Valid UTF-8 passes through: 2, 3 and 4 byte forms. */
    check_escape("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                 "\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* Each byte that starts no valid sequence becomes U+FFFD: a stray continuation, a
     * truncated sequence at the end, an overlong '/', a UTF-16 surrogate, past U+10FFFF. */
    check_escape("a\x80z", "\"a\\ufffdz\"");
    check_escape("end\xc3", "\"end\\ufffd\"");
    check_escape("\xc0\xaf", "\"\\ufffd\\ufffd\"");
    check_escape("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");
    check_escape("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    check_escape("\xff", "\"\\ufffd\"");
}

static void json_layout(void **state)
{
    (void)state;
    struct capture c;
    struct json j;
    capture_begin(&c);
    json_init(&j, c.f);
    json_object_begin(&j, NULL);
    json_string(&j, "s", "x");
    json_string(&j, "n", NULL);
    json_int(&j, "i", -3);
    json_uint(&j, "u", 18446744073709551615ull);
    json_double(&j, "d", 31.507692, 2);
    json_bool(&j, "b", false);
    json_array_begin_inline(&j, "row");
    json_int(&j, NULL, 0);
    json_int(&j, NULL, 1);
    json_array_end(&j);
    json_array_begin(&j, "empty");
    json_array_end(&j);
    json_array_begin(&j, "objs");
    json_object_begin(&j, NULL);
    json_null(&j, "k");
    json_object_end(&j);
    json_array_end(&j);
    json_object_end(&j);
    json_finish(&j);
    char *got = capture_end(&c);
    assert_string_equal(got, "{\n"
                             "  \"s\": \"x\",\n"
                             "  \"n\": null,\n"
                             "  \"i\": -3,\n"
                             "  \"u\": 18446744073709551615,\n"
                             "  \"d\": 31.51,\n"
                             "  \"b\": false,\n"
                             "  \"row\": [0, 1],\n"
                             "  \"empty\": [],\n"
                             "  \"objs\": [\n"
                             "    {\n"
                             "      \"k\": null\n"
                             "    }\n"
                             "  ]\n"
                             "}\n");
    free(got);
}

/* Three H100s of the XML (two on NUMA node 0, one on node 1): NVLink one way and PCIe
 * the other between cuda0 and cuda1, PCIe between cuda1 and cuda2, no peer access
 * between cuda0 and cuda2 nor from cuda2 to cuda1. */
static void fake_cuda(struct arinfo_cuda *c)
{
    memset(c, 0, sizeof(*c));
    c->built = true;
    c->ndevices = 3;
    for (int i = 0; i < 3; i++) {
        c->dev[i].ordinal = i;
        snprintf(c->dev[i].name, sizeof(c->dev[i].name), "NVIDIA H100 80GB HBM3");
        c->dev[i].memory_bytes = 80ull << 30;
        c->dev[i].cc_major = 9;
        c->dev[i].cc_minor = 0;
    }
    snprintf(c->dev[0].bus_id, sizeof(c->dev[0].bus_id), "0000:17:00.0");
    snprintf(c->dev[1].bus_id, sizeof(c->dev[1].bus_id), "0000:9a:00.0");
    snprintf(c->dev[2].bus_id, sizeof(c->dev[2].bus_id), "0000:2a:00.0");
    c->link[0][1] = ARINFO_LINK_NVLINK;
    c->link[1][0] = ARINFO_LINK_PCIE;
    c->link[1][2] = ARINFO_LINK_PCIE;
}

static void load(struct arinfo *ai, FILE *f, bool json)
{
    memset(ai, 0, sizeof(*ai));
    ai->topology_file = xml_path;
    ai->out = f;
    ai->json = json;
    assert_int_equal(arinfo_topo_load(ai), 0);
    if (json) {
        json_init(&ai->js, f);
        json_object_begin(&ai->js, NULL);
    }
}

static char *unload(struct arinfo *ai, struct capture *c)
{
    if (ai->json) {
        json_object_end(&ai->js);
        json_finish(&ai->js);
    }
    hwloc_topology_destroy(ai->topo);
    return capture_end(c);
}

static void cuda_section_text(void **state)
{
    (void)state;
    struct arinfo_cuda *cu = malloc(sizeof(*cu));
    assert_non_null(cu);
    struct arinfo ai;
    struct capture c;
    capture_begin(&c);
    load(&ai, c.f, false);
    fake_cuda(cu);
    arinfo_cuda_print(&ai, cu);
    memset(cu, 0, sizeof(*cu));
    snprintf(cu->note, sizeof(cu->note), "this build has no CUDA transport");
    arinfo_cuda_print(&ai, cu);
    char *got = unload(&ai, &c);
    assert_string_equal(got, "CUDA (3 devices)\n"
                             "  cuda0   0000:17:00.0  NVIDIA H100 80GB HBM3, 80 GiB, sm_90, "
                             "NUMA node 0\n"
                             "  cuda1   0000:9a:00.0  NVIDIA H100 80GB HBM3, 80 GiB, sm_90, "
                             "NUMA node 1\n"
                             "  cuda2   0000:2a:00.0  NVIDIA H100 80GB HBM3, 80 GiB, sm_90, "
                             "NUMA node 0\n"
                             "  links (row to column): NV = NVLink; else as in the PCI "
                             "section (PIX, PXB, PHB, NODE, SYS; PCI where hwloc does not know "
                             "the GPUs); * = no peer access (copies go through host memory)\n"
                             "           cuda0   cuda1   cuda2\n"
                             "  cuda0    X       NV      NODE*\n"
                             "  cuda1    SYS     X       SYS\n"
                             "  cuda2    NODE*   SYS*    X\n"
                             "\n"
                             "CUDA\n"
                             "  no CUDA devices (this build has no CUDA transport)\n");
    free(got);
    free(cu);
}

static void cuda_section_json(void **state)
{
    (void)state;
    struct arinfo_cuda *cu = malloc(sizeof(*cu));
    assert_non_null(cu);
    struct arinfo ai;
    struct capture c;
    capture_begin(&c);
    load(&ai, c.f, true);
    fake_cuda(cu);
    cu->ndevices = 2; /* the JSON of the first two */
    arinfo_cuda_print(&ai, cu);
    char *got = unload(&ai, &c);
    assert_string_equal(got, "{\n"
                             "  \"cuda\": {\n"
                             "    \"built\": true,\n"
                             "    \"note\": null,\n"
                             "    \"devices\": [\n"
                             "      {\n"
                             "        \"ordinal\": 0,\n"
                             "        \"name\": \"NVIDIA H100 80GB HBM3\",\n"
                             "        \"bus_id\": \"0000:17:00.0\",\n"
                             "        \"memory_bytes\": 85899345920,\n"
                             "        \"compute_capability\": \"9.0\",\n"
                             "        \"numa_nodes\": [0]\n"
                             "      },\n"
                             "      {\n"
                             "        \"ordinal\": 1,\n"
                             "        \"name\": \"NVIDIA H100 80GB HBM3\",\n"
                             "        \"bus_id\": \"0000:9a:00.0\",\n"
                             "        \"memory_bytes\": 85899345920,\n"
                             "        \"compute_capability\": \"9.0\",\n"
                             "        \"numa_nodes\": [1]\n"
                             "      }\n"
                             "    ],\n"
                             "    \"peer_links\": [\n"
                             "      [\"self\", \"nvlink\"],\n"
                             "      [\"pcie\", \"self\"]\n"
                             "    ]\n"
                             "  }\n"
                             "}\n");
    free(got);
    free(cu);
}

static void hexagon_section(void **state)
{
    (void)state;
    struct arinfo_hexagon h;
    memset(&h, 0, sizeof(h));
    h.built = true;
    h.emulated = true;
    h.nsessions = 1;
    h.s[0] = (struct arinfo_hex_session){.index = 0, .vtcm_bytes = 8u << 20, .hvx_threads = 4};
    snprintf(h.s[0].arch, sizeof(h.s[0].arch), "emu");
    struct arinfo ai;
    struct capture c;
    capture_begin(&c);
    load(&ai, c.f, false);
    arinfo_hexagon_print(&ai, &h);
    memset(&h, 0, sizeof(h));
    snprintf(h.note, sizeof(h.note), "no hexagon transport in this build");
    arinfo_hexagon_print(&ai, &h);
    char *got = unload(&ai, &c);
    assert_string_equal(got, "Hexagon (1 session, host emulation)\n"
                             "  session 0: emu, VTCM 8 MiB, 4 HVX threads\n"
                             "\n"
                             "Hexagon: not built (no hexagon transport in this build)\n");
    free(got);
}

/* The CUDA section finds a device's NUMA node through hwloc, by its bus id. */
static void pci_numa_by_bus_id(void **state)
{
    (void)state;
    struct arinfo ai;
    struct capture c;
    capture_begin(&c);
    load(&ai, c.f, false);
    const char *ids[] = {"0000:17:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0",
                         "0000:b5:00.0"};
    const int nodes[] = {0, 0, 1, 1, 1};
    for (size_t i = 0; i < 5; i++) {
        hwloc_const_bitmap_t set = arinfo_pci_numa(&ai, ids[i]);
        assert_non_null(set);
        assert_int_equal(hwloc_bitmap_weight(set), 1);
        assert_int_equal(hwloc_bitmap_first(set), nodes[i]);
    }
    assert_null(arinfo_pci_numa(&ai, "0000:42:00.0"));
    assert_null(arinfo_pci_numa(&ai, "not a bus id"));
    free(unload(&ai, &c));
}

/*
 * arinfo_find_path: a file beside this program's prefix (this test stands in for an
 * installed arinfo: its prefix is its directory less one level, as for <prefix>/bin),
 * else the build tree's, else the configured prefix's, said to be missing.
 */
static void find_path(void **state)
{
    (void)state;
    char out[4096], exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    /* "arinfo/test_arinfo_sections" relative to the prefix <build>/tests. */
    const char *slash = strrchr(exe, '/');
    assert_non_null(slash);
    const char *dir = slash - 1;
    while (dir > exe && *dir != '/')
        dir--;
    assert_true(arinfo_find_path(dir + 1, NULL, out, sizeof(out)));
    assert_string_equal(out, exe);
    /* Not installed: the build tree's path when it exists. */
    assert_true(arinfo_find_path("arinfo/no-such-file", exe, out, sizeof(out)));
    assert_string_equal(out, exe);
    /* Nowhere: where the prefix would put it, and false. */
    assert_false(arinfo_find_path("lib/no-such-file", "/no/such/built/file", out, sizeof(out)));
    assert_true(strlen(out) > strlen("/lib/no-such-file"));
    assert_string_equal(out + strlen(out) - strlen("/lib/no-such-file"), "/lib/no-such-file");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TOPOLOGY.xml\n", argv[0]);
        return 2;
    }
    xml_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_escapes_everything),
        cmocka_unit_test(json_layout),
        cmocka_unit_test(cuda_section_text),
        cmocka_unit_test(cuda_section_json),
        cmocka_unit_test(hexagon_section),
        cmocka_unit_test(pci_numa_by_bus_id),
        cmocka_unit_test(find_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
