#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# deps.sh - make sure the Debian packages the build needs are installed.
#   scripts/deps.sh [--gpu]   check; as root install what is missing, otherwise print the
#                             one apt-get line to run and exit 1.
# Kept in one place so `make`, `make test`, `make demo` and .ci/run agree on the list.
set -euo pipefail

# python3-venv makes the virtual environment in which `make test` installs PyTorch 2,
# numpy and pytest from PyPI (client/python/requirements-test.txt); Debian's python3-torch
# (1.13) is too old for the binding's torch.library ops and is no longer used.
pkgs=(gcc g++ make libc6-dev pkg-config libcunit1-dev libzmq3-dev libuv1-dev libprotobuf-c-dev
      protobuf-c-compiler libsystemd-dev libxxhash-dev scdoc systemd libinih-dev
      libmicrohttpd-dev libseccomp-dev clang libclang-rt-14-dev curl
      python3 python3-venv)

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # An image may ship without package lists; update only when the install cannot proceed.
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  exit 0
fi
echo "deps: missing Debian packages. Run:" >&2
echo "  sudo apt-get install -y ${missing[*]}" >&2
exit 1
