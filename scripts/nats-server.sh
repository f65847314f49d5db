#!/usr/bin/env bash
# Builds the pinned current nats-server release from the Go module proxy into a per-machine cache (once) and
# prints the binary's path on stdout. Tests that start their own nats-servers (the cluster kit, the auth kit)
# take that path from STREAMINFER_NATS_SERVER_CURRENT, which .ci/run sets from this script's output:
#   export STREAMINFER_NATS_SERVER_CURRENT="$(scripts/nats-server.sh)"
# Exit 1 (nothing on stdout, the reason on stderr) when Go is missing or the build fails.
# STREAMINFER_NATS_SERVER_VERSION overrides the pin (a vX.Y.Z tag of github.com/nats-io/nats-server/v2).
set -euo pipefail

version="${STREAMINFER_NATS_SERVER_VERSION:-v2.15.2}"
if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "scripts/nats-server.sh: STREAMINFER_NATS_SERVER_VERSION must be a release tag like v2.15.2, not '$version'" >&2
  exit 1
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/streaminfer/nats-server-${version}"
binary="$cache/nats-server"

if [[ ! -x "$binary" ]]; then
  if ! command -v go >/dev/null; then
    echo "scripts/nats-server.sh: go is not installed; cannot build nats-server ${version}" >&2
    exit 1
  fi
  echo "scripts/nats-server.sh: building nats-server ${version} into $cache (once per machine)" >&2
  mkdir -p "$cache"
  # GOBIN into a temporary directory, renamed at the end: an interrupted build never leaves a half binary.
  staging="$(mktemp -d "$cache/.build.XXXXXX")"
  trap 'rm -rf "$staging"' EXIT
  if ! GOBIN="$staging" go install "github.com/nats-io/nats-server/v2@${version}" >&2; then
    echo "scripts/nats-server.sh: go install github.com/nats-io/nats-server/v2@${version} failed" >&2
    exit 1
  fi
  mv -f "$staging/nats-server" "$binary"
fi

# The binary must run and be the version asked for (a cache dir filled by hand or by another tool).
reported="$("$binary" --version 2>&1 || true)"
if [[ "$reported" != *"${version}"* ]]; then
  echo "scripts/nats-server.sh: $binary reports '$reported', expected ${version}" >&2
  exit 1
fi
echo "$binary"
