#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pip install ./python` offline, against an installed Loom: install the
# runtime, the C++ API and the collab and ucx plugins into a temporary
# prefix, pip-install the package into a virtual environment that sees
# Debian's python3-torch, and train a few steps with loom.Optimizer there.
#   tests/scripts/python_pip.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1 build=$2 python=$3
tmp=$(mktemp -d /tmp/loom-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for component in runtime sdk cpp-dev plugin-collab-strategy plugin-ucx-collective; do
  cmake --install "$build" --prefix "$tmp/prefix" --component "$component" >/dev/null
done
# A copy of the package's sources: pip builds in the folder it is given.
mkdir -p "$tmp/src"
cp -r "$src/python" "$tmp/src/python"
cp "$src/CMakeLists.txt" "$tmp/src/"
rm -rf "$tmp/src/python/build" "$tmp/src/python/"*.egg-info
"$python" -m venv --system-site-packages "$tmp/venv"
# --no-index: nothing may come from the network.
if ! CMAKE_PREFIX_PATH="$tmp/prefix" "$tmp/venv/bin/pip" install --no-index "$tmp/src/python" >"$tmp/pip.log" 2>&1; then
  tail -40 "$tmp/pip.log"
  echo "FAIL pip install ./python"
  exit 1
fi
cd "$tmp"  # not the source folder: import the installed package
"$tmp/venv/bin/python" - <<'PY'
import torch, loom, os
where = os.path.dirname(loom.__file__)
assert "/venv/" in where, f"imported from {where}, not the venv"
names = {p["name"]: p["state"] for p in loom.plugins()["plugins"]}
assert names.get("collab") == "ok" and names.get("ucx") == "ok", names
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = loom.Optimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model, batch_size_per_step=8,
                     strategy="single")
x = torch.randn(64, 4); y = x.sum(1, keepdim=True)
first = None
for step in range(50):
    loss = torch.nn.functional.mse_loss(model(x), y)
    first = first if first is not None else loss.item()
    loss.backward(); opt.step(); opt.zero_grad()
assert opt.local_epoch == 50, opt.local_epoch
assert loss.item() < first / 10, (first, loss.item())
print(f"pip-installed loom {loom._native.__version__} from {where}: plugins {sorted(names)}; "
      f"loss {first:.3f} -> {loss.item():.4f} in 50 steps")
PY
