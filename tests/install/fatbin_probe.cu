/* SPDX-License-Identifier: MIT */
/* The smallest CUDA source: tests/install builds it with gpu_arch=auto's nvcc flags into
 * a library of its own, whose GPU code check_fatbin.py compares with what auto means. */
__global__ void fatbin_probe(int *out)
{
    *out = 1;
}
