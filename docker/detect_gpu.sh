#!/usr/bin/env bash
# Which NVIDIA GPU this container sees, from nvidia-smi (which `docker run --gpus ...` mounts
# through the NVIDIA Container Toolkit). Prints KEY=VALUE lines, one per line, to stdout:
#
#   GPU_MARKER=sm90            pytest arch marker: "sm" + compute capability digits (sm80, sm89,
#                              sm90, sm86, sm120, ...), or "none"
#   GPU_CC=9.0                 compute capability ("" when none)
#   GPU_NAME=NVIDIA H100 80GB HBM3
#   GPU_COUNT=1                GPUs listed; the first one is described
#   GPU_DRIVER=570.124.06
#   GPU_REASON=...             only when GPU_MARKER=none: why no GPU was found
#
# Exit status: 0 when a GPU was found, 1 when not (the lines above still say why).
# Values are plain text for `while IFS='=' read -r key value`, never for eval.
set -uo pipefail

none() {
  printf 'GPU_MARKER=none\nGPU_CC=\nGPU_NAME=\nGPU_COUNT=0\nGPU_DRIVER=\nGPU_REASON=%s\n' "$1"
  exit 1
}

smi=$(command -v nvidia-smi) || none "nvidia-smi not found: in a container, it was started without a GPU (run it with --gpus all, which needs the NVIDIA Container Toolkit on the host); outside one, no NVIDIA driver is installed"

out=$("$smi" --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then
  # Drivers older than R510 do not know the compute_cap field: ask for the name only and map it.
  out_names=$("$smi" --query-gpu=name,driver_version --format=csv,noheader 2>&1) ||
    none "nvidia-smi failed (exit $rc): $(printf '%s' "$out" | head -n 1)"
  out=""
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    name=${line%%,*}
    driver=${line##*, }
    case "$name" in
      *H100* | *H200* | *H800*) cc=9.0 ;;
      *L4* | *"RTX 40"* | *"RTX 6000 Ada"*) cc=8.9 ;;  # L4, L40, L40S
      *A100* | *A800* | *A30*) cc=8.0 ;;
      *A10* | *A40* | *"RTX 30"* | *A6000*) cc=8.6 ;;
      *) cc=unknown ;;
    esac
    out+="${name}, ${cc}, ${driver}"$'\n'
  done <<<"$out_names"
fi

first=$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | head -n 1)
count=$(printf '%s\n' "$out" | grep -c -v '^[[:space:]]*$')
if [ -z "$first" ] || [ "$count" -eq 0 ]; then
  none "nvidia-smi lists no GPU"
fi
case "$first" in
  *"No devices were found"* | *"couldn't communicate"* | *"NVIDIA-SMI has failed"*)
    none "nvidia-smi: $first" ;;
esac

# "NVIDIA H100 80GB HBM3, 9.0, 570.124.06": the name may hold commas, the last two fields don't.
driver=${first##*,}
rest=${first%,*}
cc=${rest##*,}
name=${rest%,*}
driver=${driver# }
cc=${cc# }
if [[ ! "$cc" =~ ^[0-9]+\.[0-9]+$ ]]; then
  none "GPU '$name' has an unknown compute capability ('$cc'); nvidia-smi is too old to report it"
fi

printf 'GPU_MARKER=sm%s\nGPU_CC=%s\nGPU_NAME=%s\nGPU_COUNT=%s\nGPU_DRIVER=%s\n' \
  "${cc/./}" "$cc" "$name" "$count" "$driver"
exit 0
