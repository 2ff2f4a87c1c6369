#!/usr/bin/env bash
# Runs a command with the GPU's device files out of reach: in a mount namespace of its own,
# every /dev/nvidia* character device is replaced by /dev/null and every /dev/nvidia* folder
# by an empty one, so no NVIDIA driver can be opened from it (what a client machine without a
# GPU looks like). Needs root (unshare --mount); prints why and exits 97 when it cannot.
#   without_gpu_files.sh CMD [ARGS...]
set -u
if [ "${1:-}" != "--inside" ]; then
  exec unshare --mount --fork "$0" --inside "$@" || { echo "without_gpu_files: unshare --mount failed (needs root)" >&2; exit 97; }
fi
shift
mount --make-rprivate / 2>/dev/null
for d in /dev/nvidia*; do
  if [ -c "$d" ]; then
    mount --bind /dev/null "$d" || { echo "without_gpu_files: cannot hide $d" >&2; exit 97; }
  elif [ -d "$d" ]; then
    mount -t tmpfs -o mode=000,size=4k none "$d" || { echo "without_gpu_files: cannot hide $d" >&2; exit 97; }
  fi
done
# Checked, not assumed: no character device of the NVIDIA driver (major 195, or nvidia-uvm's)
# is left under /dev.
left=$(find /dev -maxdepth 2 -type c -name 'nvidia*' -exec stat -c '%n %t' {} + 2>/dev/null | awk '$2 != "1"')
if [ -n "$left" ]; then
  echo "without_gpu_files: still reachable: $left" >&2
  exit 97
fi
exec "$@"
