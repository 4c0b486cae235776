#!/usr/bin/env python3
"""Same-command baselines for vyrecuda's multi-device benchmarks (core,
BenchmarkGPUPeerCopy* and BenchmarkGPUAllReduce): PyTorch's device-to-device
copy of 16 MiB and 256 MiB (within device 0, and from device 0 to 1 when
there are two), and torch.distributed's in-place float32 all-reduce over NCCL
of 256 MiB per GPU, one process per GPU, reported as bus bandwidth
(2(n-1)/n x bytes per second) and algorithm bandwidth. NVLink multicast is
kept off (NCCL_NVLS_ENABLE=0), as vyrecuda does.

Usage: python3 scripts/bench_multi_torch.py [iterations]
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZE = 256 << 20


def copy_gbps(dst_dev, src_dev, n, iters):
    src = torch.empty(n, dtype=torch.uint8, device=f"cuda:{src_dev}")
    dst = torch.empty(n, dtype=torch.uint8, device=f"cuda:{dst_dev}")
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(dst_dev)
    torch.cuda.synchronize(src_dev)
    t = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
        torch.cuda.synchronize(dst_dev)
    return n * iters / (time.perf_counter() - t) / 1e9


def worker(rank, world, iters, out):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    x = torch.ones(SIZE // 4, dtype=torch.float32, device=f"cuda:{rank}")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.barrier()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    sec = (time.perf_counter() - t) / iters
    if rank == 0:
        out.put(sec)
    dist.destroy_process_group()


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    n = torch.cuda.device_count()
    print(f"torch {torch.__version__}, nccl {torch.cuda.nccl.version()}, {n} device(s): {torch.cuda.get_device_name(0)}")
    for size in (16 << 20, SIZE):
        print(f"torch copy_ within device 0, {size >> 20} MiB: {copy_gbps(0, 0, size, iters):.1f} GB/s")
        if n >= 2:
            print(f"torch copy_ device 0 -> 1, {size >> 20} MiB: {copy_gbps(1, 0, size, iters):.1f} GB/s")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.spawn(worker, args=(n, iters, q), nprocs=n, join=True)
    sec = q.get()
    bus = 2 * (n - 1) / n * SIZE / sec / 1e9
    print(f"torch.distributed all_reduce float32 {SIZE >> 20} MiB x {n} rank(s): {sec * 1e6:.0f} us, "
          f"bus {bus:.1f} GB/s, alg {SIZE / sec / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
