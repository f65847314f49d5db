#!/usr/bin/env bash
# GPU probe: what this host offers StreamInfer. Prints the NVIDIA driver (nvidia-smi), the Vulkan loader and ICDs
# (the WebGPU provider is Dawn over Vulkan on Linux), then runs dist/scripts/gpu-probe.js: onnxruntime-node's
# listSupportedBackends(), which providers create a session for models/bench (cpu, cuda:0, webgpu:0, each with
# its error) and the bench model's items/s at batch 1, 8, 32, 64 per working provider. On a CPU-only host it
# reports CPU only and exits 0.
#
#   scripts/gpu-probe.sh [--min-ms MS] [--providers cpu,cuda,webgpu] [--models-dir DIR]
#
# On a host without a package registry, bring a pruned runtime (Node 20 must be there), built here with
# `npx tsc -p tsconfig.json`:
#   tar czf probe.tgz scripts/gpu-probe.sh dist/apps dist/libs dist/scripts models/bench \
#     node_modules/onnxruntime-node/package.json node_modules/onnxruntime-node/dist \
#     node_modules/onnxruntime-node/bin/napi-v6/linux/x64 node_modules/onnxruntime-common
# (about 60 MB; onnxruntime-node's other dependencies only serve its install script). If the host has no Vulkan
# loader (libvulkan.so.1, Debian package libvulkan1), put one in vendor/lib beside scripts/: this script adds
# it to LD_LIBRARY_PATH. The NVIDIA Vulkan ICD ships with the driver; in a container it appears only when
# NVIDIA_DRIVER_CAPABILITIES includes graphics (or is all).
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -d vendor/lib ] && export LD_LIBRARY_PATH="$root/vendor/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== host"
echo "$(uname -srm), $(nproc) cores, node $(node --version 2>/dev/null || echo 'missing')"

echo
echo "== NVIDIA driver"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv 2>&1 ||
    nvidia-smi 2>&1 | head -n 12
else
  echo "nvidia-smi: not found"
fi
[ -r /proc/driver/nvidia/version ] && head -n 1 /proc/driver/nvidia/version
for name in NVIDIA_VISIBLE_DEVICES NVIDIA_DRIVER_CAPABILITIES CUDA_VISIBLE_DEVICES; do
  [ -n "${!name:-}" ] && echo "$name=${!name}"
done

echo
echo "== Vulkan"
loader=$( (ldconfig -p 2>/dev/null | grep -o '/.*libvulkan\.so\.1$' | head -n 1) || true)
if [ -z "$loader" ] && [ -e vendor/lib/libvulkan.so.1 ]; then loader="$root/vendor/lib/libvulkan.so.1"; fi
echo "loader libvulkan.so.1: ${loader:-not found (WebGPU cannot start without it)}"
for name in VK_ICD_FILENAMES VK_DRIVER_FILES VK_ADD_DRIVER_FILES; do
  [ -n "${!name:-}" ] && echo "$name=${!name}"
done
icds=0
for dir in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
  [ -d "$dir" ] || continue
  for file in "$dir"/*.json; do
    [ -e "$file" ] || continue
    icds=$((icds + 1))
    library=$(grep -o '"library_path"[^,}]*' "$file" | head -n 1 | sed 's/.*: *//')
    echo "ICD $file -> ${library:-?}"
  done
done
[ "$icds" -eq 0 ] && echo "ICDs: none in /usr/share/vulkan/icd.d, /etc/vulkan/icd.d, /usr/local/share/vulkan/icd.d"
if command -v vulkaninfo >/dev/null 2>&1; then
  vulkaninfo --summary 2>&1 | sed -n '/Devices:/,$p' | head -n 20
fi

echo
if [ ! -f dist/scripts/gpu-probe.js ]; then
  echo "dist/scripts/gpu-probe.js is missing: build with npx tsc -p tsconfig.json (or bring dist/ along)"
  exit 2
fi
exec node dist/scripts/gpu-probe.js "$@"
