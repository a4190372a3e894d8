#!/usr/bin/env bash
# Debian packages r2s2r needs: ffmpeg (video encode/decode libraries for PyAV, torchcodec and decord)
# and Mesa's EGL/OSMesa for MuJoCo's offscreen rendering; chromium, the real browser the HTML report's test
# opens its page in (through Playwright, whose own browser download CI cannot reach). Installs only what is
# missing.
set -euo pipefail
wanted=(ffmpeg libegl1 libgl1 libosmesa6 libglib2.0-0 chromium)
missing=()
for pkg in "${wanted[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "install_system_deps: missing ${missing[*]} and no apt-get here; install them with your package manager" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "install_system_deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
