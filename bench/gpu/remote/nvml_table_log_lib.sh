# shellcheck shell=bash disable=SC2154 # $here, $work and $out are the caller's (REQUIRES)
# Shared by nvml_table_log.sh and library_tables.sh (sourced, not run): finding the real
# driver libraries and building nvml_table_logger.c in front of one of them.
# REQUIRES: the caller sets $here (this folder), $work (a scratch folder, removed by the
# caller) and $out (where build errors and the forwarded names are kept).

# nvl_find_real SONAME: the real library's file (symlinks resolved) from `ldconfig -p`, else
# from the usual x86-64 folders; nothing when there is none.
nvl_find_real() {
  local soname=$1 p
  p=$(ldconfig -p 2>/dev/null | awk -v s="$soname" '$1 == s && /x86-64/ { print $NF; exit }')
  if [ -z "$p" ]; then
    for c in /usr/lib/x86_64-linux-gnu/"$soname" /usr/lib64/"$soname" /usr/lib/"$soname"; do
      [ -e "$c" ] && { p=$c; break; }
    done
  fi
  [ -n "$p" ] && readlink -f "$p"
}

# nvl_build_logger REAL SONAME HANDWRITTEN [CFLAGS...]: a logger forwarding every defined
# function export of REAL but those in HANDWRITTEN (space-separated), as $work/lib/SONAME.
nvl_build_logger() {
  local real=$1 soname=$2 own=$3 d=$work/$2
  shift 3
  mkdir -p "$d" "$work/lib"
  # shellcheck disable=SC2086 # one name per word
  printf '%s\n' $own _init _fini >"$d/own"
  nm -D --defined-only "$real" | awk '$2 ~ /^[TWi]$/ { sub(/@.*/, "", $3); print $3 }' |
    grep -v -x -F -f "$d/own" | sort -u >"$d/names"
  local n
  n=$(wc -l <"$d/names")
  if [ "$n" -eq 0 ] || [ "$n" -gt 8192 ]; then
    echo "nvl_build_logger: $n exports read from $real" >&2
    return 1
  fi
  awk 'BEGIN { print ".text" }
       { printf ".globl %s\n.type %s,@function\n%s:\n  movl $%d, %%r11d\n  jmp nvl_fwd_common\n.size %s, .-%s\n",
                $1, $1, $1, NR - 1, $1, $1 }
       END { print ".section .note.GNU-stack,\"\",@progbits" }' "$d/names" >"$d/fwd.S"
  awk 'BEGIN { print "__attribute__((visibility(\"hidden\"))) const char *const nvl_fwd_names[] = {" }
       { printf "  \"%s\",\n", $1 }
       END { printf "};\n__attribute__((visibility(\"hidden\"))) const unsigned nvl_fwd_count = %d;\n", NR }' \
    "$d/names" >"$d/names.c"
  # Named like the real file (libnvidia-ml.so.580.xx), found through the soname's link,
  # as the driver's own library is: a check of the mapped file's name sees the same.
  local file
  file=$(basename "$real")
  [ "$file" = "$soname" ] && file=$soname.logger
  if ! gcc -O2 -fPIC -shared -Wl,-soname,"$soname" -o "$work/lib/$file" "$@" \
      "$here/nvml_table_logger.c" "$d/fwd.S" "$d/names.c" -ldl -lpthread 2>"$out/build.$soname.err"; then
    echo "nvl_build_logger: build of $soname failed:" >&2
    cat "$out/build.$soname.err" >&2
    return 1
  fi
  ln -sf "$file" "$work/lib/$soname"
  cp "$d/names" "$out/forwarded.$soname.txt"
  echo "$soname: $n exports of $real forwarded"
}
