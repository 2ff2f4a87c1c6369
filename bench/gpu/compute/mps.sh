#!/usr/bin/env bash
# An MPS control daemon for a GPU suite, with its own pipe and log folders (never the
# system's /tmp/nvidia-mps): only processes given CUDA_MPS_PIPE_DIRECTORY=DIR/pipe become
# its clients, so the suite's native processes stay off MPS while it runs.
#
#   mps.sh start DIR   makes DIR/pipe and DIR/log and starts the daemon; exit 1 if it is not up
#   mps.sh stop DIR    asks the daemon to quit, waits until it and its servers have exited (the
#                      ones it started are ended by id after 10 s), prints its log's tail
#   mps.sh run LOG -- COMMAND...
#                      a daemon in a new /tmp folder for COMMAND, run as its client (the
#                      variables below exported), stopped and removed after it, however it
#                      ends; start and stop write to LOG. Exits with COMMAND's status, or 1
#                      (and a line saying so) when the daemon does not start
#
# Clients: CUDA_MPS_PIPE_DIRECTORY=DIR/pipe CUDA_MPS_LOG_DIRECTORY=DIR/log. Compute mode,
# clocks and power are never changed.
set -uo pipefail
cmd=${1:-} dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: mps.sh start|stop DIR, or mps.sh run LOG -- COMMAND..." >&2
  exit 2
fi
if [ "$cmd" = run ]; then
  log=$dir
  shift 2
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || { echo "usage: mps.sh run LOG -- COMMAND..." >&2; exit 2; }
  self=$(readlink -f "$0")
  run_dir=$(mktemp -d /tmp/gslice-mps-XXXXXX)
  trap 'bash "$self" stop "$run_dir" >>"$log" 2>&1; rm -rf "$run_dir"' EXIT
  trap 'exit 143' INT TERM
  if ! bash "$self" start "$run_dir" >>"$log" 2>&1; then
    echo "RESULT mps.setup FAIL the MPS daemon did not start ($log)"
    exit 1
  fi
  export CUDA_MPS_PIPE_DIRECTORY="$run_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$run_dir/log"
  "$@"
  exit $?
fi
export CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" CUDA_MPS_LOG_DIRECTORY="$dir/log"
pidfile="$dir/pipe/nvidia-cuda-mps-control.pid"
case "$cmd" in
  start)
    command -v nvidia-cuda-mps-control >/dev/null || { echo "mps.sh: no nvidia-cuda-mps-control" >&2; exit 1; }
    mkdir -p "$dir/pipe" "$dir/log"
    nvidia-cuda-mps-control -d || exit 1
    for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.1; done
    if ! [ -s "$pidfile" ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "mps.sh: the daemon did not come up" >&2
      exit 1
    fi
    ;;
  stop)
    [ -s "$pidfile" ] || exit 0
    control=$(cat "$pidfile")
    servers=$(echo get_server_list | nvidia-cuda-mps-control 2>/dev/null | grep -E '^[0-9]+$' || true)
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    for _ in $(seq 100); do
      alive=0
      for p in $control $servers; do kill -0 "$p" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break
      sleep 0.1
    done
    for p in $servers $control; do
      kill -0 "$p" 2>/dev/null && { echo "mps.sh: $p still up after quit; ending it" >&2; kill -9 "$p" 2>/dev/null; }
    done
    rm -f "$pidfile"
    tail -n 20 "$dir"/log/*.log 2>/dev/null
    ;;
  *) echo "usage: mps.sh start|stop DIR" >&2; exit 2 ;;
esac
exit 0
