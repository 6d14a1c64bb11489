#!/usr/bin/env bash
# The GPU machine's check, run through the `device` tool when a task is lent one:
#   here:   ninja -C build gpu_health_check && mkdir -p gpu-carry && cp build/bench/gpu_health_check gpu-carry/
#   device: run(command="bench/gpu_check.sh", carry=["gpu-carry"])
# The machine is bare (no torch), so the check is a standalone binary: the CUDA health kernels
# and the value-difference kernels (diff --values) against the CPU path, bit for bit, on every
# health dtype, several dtype pairs and awkward sizes; then throughput, the value-difference
# kernel against the device's own copy bandwidth.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv || true
gpu-carry/gpu_health_check "${1:-2048}" | tee "${OUT:-/tmp}/gpu_health_check.jsonl"
