#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails on any ABI change of the frozen v1 SDK structs: abidiff exits non-zero
# for added, removed, resized or moved fields (it reports some of these as
# "changes" rather than "incompatible", so any non-zero result fails).
# To accept a deliberate change of an unreleased struct, regenerate:
#   abidw --no-show-locs --no-corpus-path --out-file sdk/abi/loom-sdk-v1.abi build/tests/libloom_abi_probe.so
set -euo pipefail
baseline=$1 probe=$2
tmp=$(mktemp /tmp/loom-abi-XXXXXX.abi)
trap 'rm -f "$tmp"' EXIT
abidw --no-show-locs --no-corpus-path --out-file "$tmp" "$probe"
if abidiff "$baseline" "$tmp"; then
  echo "SDK v1 ABI unchanged"
else
  echo "FAIL: the SDK v1 ABI differs from $baseline (see above)"
  exit 1
fi
