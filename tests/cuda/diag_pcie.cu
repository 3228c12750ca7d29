/* SPDX-License-Identifier: MIT */
/*
 * diag_pcie: the PCIe / host-memory ceilings of an allreduce that stages through pinned
 * host memory (no NVLink, no peer access).  Each GPU gets one device source, one device
 * destination and two host buffers (D2H target, H2D source), the host buffers allocated
 * like the CUDA transport does it: a POSIX shm object mapped MAP_SHARED, MADV_HUGEPAGE,
 * touched, then cudaHostRegister(Mapped | Portable).
 *
 * Measured, each best of 3 repetitions, each repetition moving 4 x the buffer per stream,
 * timed with CLOCK_MONOTONIC around enqueue-all + synchronize-all:
 *   1. GPU 0 alone: copy-engine (CE) D2H; H2D; D2H and H2D at once on two streams.
 *   2. All GPUs at once: the same three.
 *   3. All GPUs D2H+H2D in 2 MiB and in 512 KiB cudaMemcpyAsync pieces (a chunk pipeline).
 *   4. All GPUs D2H+H2D where GPU g's H2D reads what GPU (g+1)%G's D2H writes.
 *   5. All GPUs: D2H split over two streams (two copy engines) + H2D on a third.
 *   6. SM copies through mapped host memory (zero-copy kernels, 16-byte loads/stores):
 *      write to host, read from host; GPU 0 alone, then all GPUs; all GPUs with a kernel
 *      writing to host while a CE H2D runs (and the mirror image, and both kernels).
 *   7. (Printed first) device facts, peer-access matrix, THP and NUMA placement.
 *
 * Run:  diag_pcie [MiB]      (MiB per buffer, default 64; exits 77 without a GPU)
 * GB/s is 1e9 bytes per second.  Per GPU and direction: bytes moved / wall time of the
 * whole measurement; "sum" adds them over GPUs.  Where one stream finished well before
 * the others, an "own" line follows with each direction's rate over its own busy time
 * (CUDA events), which is what that stream could do while the others ran.
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAXG    8
#define NSTREAM 3 /* per GPU: 0 = D2H, 1 = H2D, 2 = second D2H */
#define REPS    3 /* timed repetitions, the best one counts */
#define PASSES  4 /* buffer passes per stream per repetition */
#define THREADS 512

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { D2H = 0, H2D = 1 };
enum { CE = 0, SM = 1 };

/* One stream's work in a measurement: PASSES x bytes, in pieces of 'piece' bytes. */
struct op {
    int gpu, stream, engine, dir;
    void *dst;
    const void *src;
    size_t bytes, piece;
};

static int G;                                  /* GPUs used */
static size_t B;                               /* bytes per buffer */
static int nblk[MAXG];                         /* SM copy kernel blocks: 2 x SM count */
static unsigned char *dsrc[MAXG], *ddst[MAXG]; /* device: D2H source, H2D destination */
static unsigned char *hd2h[MAXG], *hh2d[MAXG]; /* host: D2H target, H2D source */
static unsigned char *md2h[MAXG], *mh2d[MAXG]; /* the same, device pointers of GPU g */
static cudaStream_t str[MAXG][NSTREAM];
static cudaEvent_t ev[MAXG][NSTREAM][2]; /* start, end of each stream's work */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* Grid-stride copy of n 16-byte words, 4 in flight per thread; __ldcv re-fetches
 * (no cached host lines), __stcg skips L1. */
__global__ void sm_copy(uint4 *dst, const uint4 *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcv(src + i);
        uint4 b = __ldcv(src + i + stride);
        uint4 c = __ldcv(src + i + 2 * stride);
        uint4 d = __ldcv(src + i + 3 * stride);
        __stcg(dst + i, a);
        __stcg(dst + i + stride, b);
        __stcg(dst + i + 2 * stride, c);
        __stcg(dst + i + 3 * stride, d);
    }
    for (; i < n; i += stride)
        __stcg(dst + i, __ldcv(src + i));
}

/* Pinned staging memory as the transport makes it: shm object, shared mapping, THP
 * advice, touched, registered mapped and portable. */
static unsigned char *host_alloc(size_t bytes, int tag)
{
    char name[64];
    snprintf(name, sizeof(name), "/arcomm-diag-pcie-%d-%d", (int)getpid(), tag);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        die("shm_open");
    shm_unlink(name);
    if (ftruncate(fd, (off_t)bytes) != 0)
        die("ftruncate");
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        die("mmap");
    madvise(p, bytes, MADV_HUGEPAGE); /* fails harmlessly where shmem THP is off */
    memset(p, tag + 1, bytes);
    CK(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    return (unsigned char *)p;
}

static void host_free(unsigned char *p)
{
    CK(cudaHostUnregister(p));
    if (munmap(p, B) != 0)
        die("munmap");
}

/* NUMA node of the page at p (move_pages query), -1 if unknown. */
static int page_node(void *p)
{
    void *pages[1] = {p};
    int status[1] = {-1};
    if (syscall(SYS_move_pages, 0, 1UL, pages, NULL, status, 0) != 0)
        return -1;
    return status[0];
}

/* First line of a small text file, newline dropped; "?" if unreadable. */
static void read_line(const char *path, char *buf, size_t len)
{
    snprintf(buf, len, "?");
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fgets(buf, (int)len, f) == NULL)
        snprintf(buf, len, "?");
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

static void print_facts(void)
{
    printf("# %d GPU(s), %zu MiB per buffer\n", G, B >> 20);
    for (int g = 0; g < G; g++) {
        struct cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, g));
        char bus[32], path[128], node[32], speed[64], width[32];
        CK(cudaDeviceGetPCIBusId(bus, sizeof(bus), g));
        for (char *c = bus; *c; c++)
            if (*c >= 'A' && *c <= 'F')
                *c = (char)(*c - 'A' + 'a');
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
        read_line(path, node, sizeof(node));
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_speed", bus);
        read_line(path, speed, sizeof(speed));
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_width", bus);
        read_line(path, width, sizeof(width));
        printf("# GPU %d: %s  pciBusID %d (%s)  asyncEngineCount %d  SMs %d  numa_node %s  "
               "link %s x%s\n",
               g, p.name, p.pciBusID, bus, p.asyncEngineCount, p.multiProcessorCount, node, speed,
               width);
        printf("#   host buffers on node: D2H target %d, H2D source %d\n", page_node(hd2h[g]),
               page_node(hh2d[g]));
    }
    for (int a = 0; a < G; a++) {
        printf("# canAccessPeer from GPU %d:", a);
        for (int b = 0; b < G; b++) {
            int can = 0;
            if (a != b)
                CK(cudaDeviceCanAccessPeer(&can, a, b));
            printf(" %s", a == b ? "-" : can ? "yes" : "no");
        }
        printf("\n");
    }
    char line[256];
    read_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", line, sizeof(line));
    printf("# shmem_enabled: %s\n", line);
    /* How much of our shm is mapped with 2 MiB pages (all host buffers: 2 x G x B). */
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "ShmemPmdMapped:", 15) == 0)
            printf("# %.*s of %zu kB host buffers\n", (int)strcspn(line, "\n"), line,
                   2 * (size_t)G * B >> 10);
    if (f)
        fclose(f);
}

static void enqueue(const struct op *o, size_t k)
{
    cudaStream_t s = str[o->gpu][o->stream];
    if (o->engine == SM) {
        sm_copy<<<nblk[o->gpu], THREADS, 0, s>>>((uint4 *)o->dst, (const uint4 *)o->src,
                                                 o->bytes / 16);
        CK(cudaGetLastError());
        return;
    }
    size_t off = k * o->piece;
    size_t len = o->bytes - off < o->piece ? o->bytes - off : o->piece;
    CK(cudaMemcpyAsync((char *)o->dst + off, (const char *)o->src + off, len,
                       o->dir == D2H ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s));
}

static size_t npieces(const struct op *o)
{
    return o->engine == SM ? 1 : (o->bytes + o->piece - 1) / o->piece;
}

static void rates(const struct op *ops, int n, const double *secs, double r[MAXG][2])
{
    memset(r, 0, sizeof(double) * MAXG * 2);
    for (int i = 0; i < n; i++)
        r[ops[i].gpu][ops[i].dir] += (double)PASSES * (double)ops[i].bytes;
    for (int g = 0; g < G; g++)
        for (int d = 0; d < 2; d++)
            r[g][d] = secs[g * 2 + d] > 0 ? r[g][d] / secs[g * 2 + d] * 1e-9 : -1;
}

static void print_rates(const char *name, const double r[MAXG][2], const char *tail)
{
    double sum[2] = {0, 0};
    printf("%-26s", name);
    for (int g = 0; g < G; g++) {
        printf(" | g%d", g);
        for (int d = 0; d < 2; d++) {
            if (r[g][d] < 0) {
                printf(" %s     -", d == D2H ? "D2H" : "H2D");
                continue;
            }
            printf(" %s %5.1f", d == D2H ? "D2H" : "H2D", r[g][d]);
            sum[d] += r[g][d];
        }
    }
    printf(" | sum D2H %5.1f H2D %5.1f both %5.1f%s\n", sum[0], sum[1], sum[0] + sum[1], tail);
}

/* Runs ops concurrently (pieces enqueued round-robin over the streams so that all start
 * together), REPS times; prints the best repetition. */
static void measure(const char *name, const struct op *ops, int n)
{
    double best = 1e30, best_enq = 0;
    double own[MAXG * 2];
    size_t maxp = 0;
    for (int i = 0; i < n; i++)
        if (npieces(&ops[i]) > maxp)
            maxp = npieces(&ops[i]);
    for (int rep = 0; rep < REPS; rep++) {
        for (int g = 0; g < G; g++) {
            CK(cudaSetDevice(g));
            CK(cudaDeviceSynchronize());
        }
        int cur = -1;
        double t0 = now();
        for (int i = 0; i < n; i++) {
            if (ops[i].gpu != cur)
                CK(cudaSetDevice(cur = ops[i].gpu));
            CK(cudaEventRecord(ev[ops[i].gpu][ops[i].stream][0], str[ops[i].gpu][ops[i].stream]));
        }
        for (int pass = 0; pass < PASSES; pass++)
            for (size_t k = 0; k < maxp; k++)
                for (int i = 0; i < n; i++) {
                    if (k >= npieces(&ops[i]))
                        continue;
                    if (ops[i].gpu != cur)
                        CK(cudaSetDevice(cur = ops[i].gpu));
                    enqueue(&ops[i], k);
                }
        for (int i = 0; i < n; i++) {
            if (ops[i].gpu != cur)
                CK(cudaSetDevice(cur = ops[i].gpu));
            CK(cudaEventRecord(ev[ops[i].gpu][ops[i].stream][1], str[ops[i].gpu][ops[i].stream]));
        }
        double t_enq = now();
        for (int i = 0; i < n; i++)
            CK(cudaStreamSynchronize(str[ops[i].gpu][ops[i].stream]));
        double t = now() - t0;
        if (t >= best)
            continue;
        best = t;
        best_enq = t_enq - t0;
        for (int j = 0; j < MAXG * 2; j++)
            own[j] = 0;
        for (int i = 0; i < n; i++) {
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, ev[ops[i].gpu][ops[i].stream][0],
                                    ev[ops[i].gpu][ops[i].stream][1]));
            double *o = &own[ops[i].gpu * 2 + ops[i].dir];
            if (ms * 1e-3 > *o)
                *o = ms * 1e-3;
        }
    }
    double wall[MAXG * 2], r[MAXG][2], ro[MAXG][2];
    for (int j = 0; j < MAXG * 2; j++)
        wall[j] = own[j] > 0 ? best : 0;
    rates(ops, n, wall, r);
    rates(ops, n, own, ro);
    char tail[96];
    snprintf(tail, sizeof(tail), " | wall %6.1f ms, enqueue %5.1f ms", best * 1e3, best_enq * 1e3);
    print_rates(name, r, tail);
    /* Busy-time rates only where some stream ran >10% faster than the wall rate says. */
    for (int g = 0; g < G; g++)
        for (int d = 0; d < 2; d++)
            if (r[g][d] > 0 && ro[g][d] > 1.1 * r[g][d]) {
                print_rates("  own busy time", ro, "");
                return;
            }
}

static struct op ce(int g, int stream, int dir, void *dst, const void *src, size_t bytes,
                    size_t piece)
{
    struct op o = {g, stream, CE, dir, dst, src, bytes, piece};
    return o;
}

static struct op sm(int g, int stream, int dir)
{
    struct op o = {g, stream, SM, dir, NULL, NULL, B, B};
    if (dir == D2H) {
        o.dst = md2h[g];
        o.src = dsrc[g];
    } else {
        o.dst = ddst[g];
        o.src = mh2d[g];
    }
    return o;
}

static struct op d2h(int g, size_t piece)
{
    return ce(g, 0, D2H, hd2h[g], dsrc[g], B, piece);
}

static struct op h2d(int g, size_t piece)
{
    return ce(g, 1, H2D, ddst[g], hh2d[g], B, piece);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    if (mib < 1 || mib > 4096) {
        fprintf(stderr, "usage: %s [MiB per buffer, 1..4096, default 64]\n", argv[0]);
        return 2;
    }
    B = mib << 20;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    G = ndev < MAXG ? ndev : MAXG;

    /* Contexts, device buffers, streams, events first; then the portable host memory. */
    for (int g = 0; g < G; g++) {
        struct cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, g));
        nblk[g] = 2 * p.multiProcessorCount;
        CK(cudaSetDevice(g));
        CK(cudaMalloc((void **)&dsrc[g], B));
        CK(cudaMalloc((void **)&ddst[g], B));
        CK(cudaMemset(dsrc[g], 0x5a, B));
        CK(cudaMemset(ddst[g], 0, B));
        for (int s = 0; s < NSTREAM; s++) {
            CK(cudaStreamCreateWithFlags(&str[g][s], cudaStreamNonBlocking));
            CK(cudaEventCreate(&ev[g][s][0]));
            CK(cudaEventCreate(&ev[g][s][1]));
        }
        CK(cudaDeviceSynchronize());
    }
    CK(cudaSetDevice(0));
    for (int g = 0; g < G; g++) {
        hd2h[g] = host_alloc(B, 2 * g);
        hh2d[g] = host_alloc(B, 2 * g + 1);
    }
    for (int g = 0; g < G; g++) {
        CK(cudaSetDevice(g));
        CK(cudaHostGetDevicePointer((void **)&md2h[g], hd2h[g], 0));
        CK(cudaHostGetDevicePointer((void **)&mh2d[g], hh2d[g], 0));
    }
    print_facts();

    struct op o[3 * MAXG];
    int n;

    /* 1. GPU 0 alone, copy engines. */
    o[0] = d2h(0, B);
    measure("1 g0 CE D2H", o, 1);
    o[0] = h2d(0, B);
    measure("1 g0 CE H2D", o, 1);
    o[0] = d2h(0, B);
    o[1] = h2d(0, B);
    measure("1 g0 CE D2H+H2D", o, 2);

    /* 2. All GPUs at once. */
    for (int g = 0; g < G; g++)
        o[g] = d2h(g, B);
    measure("2 all CE D2H", o, G);
    for (int g = 0; g < G; g++)
        o[g] = h2d(g, B);
    measure("2 all CE H2D", o, G);
    for (int g = 0; g < G; g++) {
        o[2 * g] = d2h(g, B);
        o[2 * g + 1] = h2d(g, B);
    }
    measure("2 all CE D2H+H2D", o, 2 * G);

    /* 3. The same in pipeline-sized pieces. */
    for (int g = 0; g < G; g++) {
        o[2 * g] = d2h(g, 2u << 20);
        o[2 * g + 1] = h2d(g, 2u << 20);
    }
    measure("3 all CE D2H+H2D 2MiB", o, 2 * G);
    for (int g = 0; g < G; g++) {
        o[2 * g] = d2h(g, 512u << 10);
        o[2 * g + 1] = h2d(g, 512u << 10);
    }
    measure("3 all CE D2H+H2D 512KiB", o, 2 * G);

    /* 4. Cross traffic: GPU g reads what GPU g+1 writes. */
    for (int g = 0; g < G; g++) {
        o[2 * g] = d2h(g, B);
        o[2 * g + 1] = ce(g, 1, H2D, ddst[g], hd2h[(g + 1) % G], B, B);
    }
    measure("4 all CE D2H+H2D cross", o, 2 * G);

    /* 5. D2H in two halves on two streams, H2D on a third. */
    n = 0;
    for (int g = 0; g < G; g++) {
        o[n++] = ce(g, 0, D2H, hd2h[g], dsrc[g], B / 2, B / 2);
        o[n++] = ce(g, 2, D2H, hd2h[g] + B / 2, dsrc[g] + B / 2, B / 2, B / 2);
        o[n++] = h2d(g, B);
    }
    measure("5 all CE 2xD2H+H2D", o, n);

    /* 6. SM copies through mapped host memory. */
    o[0] = sm(0, 0, D2H);
    measure("6a g0 SM D2H", o, 1);
    o[0] = sm(0, 1, H2D);
    measure("6b g0 SM H2D", o, 1);
    for (int g = 0; g < G; g++)
        o[g] = sm(g, 0, D2H);
    measure("6a all SM D2H", o, G);
    for (int g = 0; g < G; g++)
        o[g] = sm(g, 1, H2D);
    measure("6b all SM H2D", o, G);
    for (int g = 0; g < G; g++) {
        o[2 * g] = sm(g, 0, D2H);
        o[2 * g + 1] = h2d(g, B);
    }
    measure("6c all SM D2H + CE H2D", o, 2 * G);
    for (int g = 0; g < G; g++) {
        o[2 * g] = d2h(g, B);
        o[2 * g + 1] = sm(g, 1, H2D);
    }
    measure("6d all CE D2H + SM H2D", o, 2 * G);
    for (int g = 0; g < G; g++) {
        o[2 * g] = sm(g, 0, D2H);
        o[2 * g + 1] = sm(g, 1, H2D);
    }
    measure("6e all SM D2H + SM H2D", o, 2 * G);

    /* Clean up. */
    for (int g = 0; g < G; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
    }
    for (int g = 0; g < G; g++) {
        host_free(hd2h[g]);
        host_free(hh2d[g]);
    }
    for (int g = 0; g < G; g++) {
        CK(cudaSetDevice(g));
        for (int s = 0; s < NSTREAM; s++) {
            CK(cudaEventDestroy(ev[g][s][0]));
            CK(cudaEventDestroy(ev[g][s][1]));
            CK(cudaStreamDestroy(str[g][s]));
        }
        CK(cudaFree(dsrc[g]));
        CK(cudaFree(ddst[g]));
    }
    return 0;
}
