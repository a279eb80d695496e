#!/usr/bin/env bash
# ensure-deps.sh: install the Debian packages tilerun builds with, when any is missing.
# Sourced or run by ./run.sh and ./test.sh. Installs as root or through passwordless sudo;
# otherwise prints the exact install line and exits non-zero. Safe to run repeatedly.
set -euo pipefail

TILERUN_APT_PACKAGES=(bazel-bootstrap bazel-platforms libzmq3-dev nanopb libnanopb-dev libyaml-dev catch2
                      libdlpack-dev libopenblas-dev python3 python3-dev python3-numpy python3-venv python3-setuptools python3-wheel clang libclang-rt-14-dev valgrind
                      pkgconf xz-utils)

missing=()
for pkg in "${TILERUN_APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

line="apt-get install -y --no-install-recommends ${missing[*]}"
echo "tilerun: missing packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
  sudo_cmd=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo_cmd=(sudo -n)
else
  echo "tilerun: cannot install them (not root, no passwordless sudo). Run:" >&2
  echo "  sudo apt-get update && sudo $line" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "tilerun: installing: ${missing[*]}" >&2
if ! "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
  "${sudo_cmd[@]}" apt-get update >&2
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
