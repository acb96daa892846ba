# Sourced by tools/k8s/build.sh and tools/helm/build.sh: what both need to build a Go binary
# from a wrapper module into a versioned cache folder.
#   need_go MIN        go on PATH (or /usr/local/go/bin), else a message naming MIN and exit 1
#   modver GOMOD MOD   the version GOMOD requires of module MOD ("require MOD v" or a line of
#                      a require block)
#   go_build_env BIN   GOFLAGS (-mod=mod unless set), $jobs (GPUPOOL_K8S_BUILD_JOBS, default 2:
#                      more only adds memory pressure on the 2-core reference machine), and
#                      $staging, a folder inside BIN removed on exit (a binary lands whole with
#                      one mv from there, so a reader never sees half a file)

need_go() {
  if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  command -v go >/dev/null || { echo "build.sh: go is not on PATH (need go >= $1)" >&2; exit 1; }
}

modver() {
  awk -v m="$2" '$1 == "require" && $2 == m {print $3} $1 == m && NF >= 2 {print $2}' "$1" | head -n1
}

go_build_env() {
  export GOFLAGS="${GOFLAGS:--mod=mod}"
  jobs="${GPUPOOL_K8S_BUILD_JOBS:-2}"
  mkdir -p "$1"
  staging="$(mktemp -d "$1/.staging.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the folder of this run
  trap "rm -rf '$staging'" EXIT
}
