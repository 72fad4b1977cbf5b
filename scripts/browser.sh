#!/usr/bin/env bash
# The headless browser of the /ui page's tests (tests/browser_harness.py): Debian's chromium and
# chromium-driver, one source package, so the browser and its driver are always of one version.
# When either is missing they are installed with apt-get (as root, or with sudo); where that cannot be
# done, this exits 1 saying what to install. SDR_CHROMIUM / SDR_CHROMEDRIVER name another browser and
# driver (of one version) instead. scripts/setup.sh runs this.
set -euo pipefail
missing=()
[ -n "${SDR_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -n "${SDR_CHROMEDRIVER:-}" ] || command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$EUID" -ne 0 ]; then SUDO=$(command -v sudo || true); fi
if ! command -v apt-get >/dev/null 2>&1 || { [ "$EUID" -ne 0 ] && [ -z "$SUDO" ]; }; then
  echo "setup: the /ui page's browser tests need Debian's chromium and chromium-driver (missing: ${missing[*]}), and" \
       "they cannot be installed here (apt-get as root or with sudo): install them (apt-get install -y chromium" \
       "chromium-driver), or set SDR_CHROMIUM and SDR_CHROMEDRIVER to a browser and its driver" >&2
  exit 1
fi
echo "setup: ${missing[*]} (apt-get) for the /ui page's browser tests"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
