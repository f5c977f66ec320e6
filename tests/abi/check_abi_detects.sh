#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves that sdk.abi can fail: a probe built against a copy of the headers
# in which two members of loom_comm_config_v1 trade places (rank and size:
# same type and size, so no static assert notices) must be reported by
# check_abi.sh as a change of the v1 ABI.
set -euo pipefail
check=$1 baseline=$2 mutant=$3
if out=$("$check" "$baseline" "$mutant" 2>&1); then
  echo "FAIL: check_abi.sh accepted a probe whose loom_comm_config_v1 changed"
  echo "$out"
  exit 1
fi
if ! grep -q "FAIL: the SDK v1 ABI differs" <<<"$out" || ! grep -q "loom_comm_config_v1" <<<"$out"; then
  echo "FAIL: check_abi.sh failed, but not by reporting the changed struct:"
  echo "$out"
  exit 1
fi
echo "check_abi.sh reported the deliberate change, as it must:"
head -n 30 <<<"$out"
