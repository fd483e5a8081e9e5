# Sourced by scripts/setup and scripts/netem-vm (which define log): the binaries they build with
# cargo are kept machine-wide by their source's hash (or version), so that another checkout on this
# machine (a CI's clean clone) installs them in a second instead of building for minutes; a new
# source builds, as on a machine that never built it. Remove /var/cache/plt-bench to build afresh.
# (tests/conftest.py keeps cargo test's builds beside, in /var/cache/plt-bench/cargo-test.)
bin_cache="${PLT_BENCH_BIN_CACHE:-/var/cache/plt-bench/bin}"  # (another folder: a first setup's time, measured)
from_cache() {  # NAME KEY DEST: the cached build of NAME at KEY, put in place (a new file renamed in)
  [ -x "$bin_cache/$1-$2" ] || return 1
  mkdir -p "$(dirname "$3")"
  install -m 0755 "$bin_cache/$1-$2" "$3.new" && mv -f "$3.new" "$3" && log "$1: this machine's build of it, reused"
}
to_cache() {  # NAME KEY FILE
  mkdir -p "$bin_cache"
  install -m 0755 "$3" "$bin_cache/.$1-$2.new" && mv -f "$bin_cache/.$1-$2.new" "$bin_cache/$1-$2"
}
