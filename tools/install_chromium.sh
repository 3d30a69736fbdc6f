#!/usr/bin/env bash
# Headless Chromium and its WebDriver for tests/test_docs.py, from Debian's packages.
# Idempotent: does nothing when a Chromium/Chrome and a chromedriver are already installed. .ci/run calls it as root;
# elsewhere it uses sudo. Where no apt-get exists (or it fails) it says so and exits 0: test_docs.py then skips
# its browser test with a message, and the rest of the suite is unaffected.
set -uo pipefail
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
driver="$(command -v chromedriver || true)"
if [ -z "$driver" ] && [ -n "${CHROMEWEBDRIVER:-}" ] && [ -x "$CHROMEWEBDRIVER/chromedriver" ]; then driver="$CHROMEWEBDRIVER/chromedriver"; fi
if [ -n "$browser" ] && [ -n "$driver" ]; then        # Debian's, or the Chrome that GitHub's Ubuntu runners ship
    echo "install_chromium: $("$browser" --version 2>/dev/null | head -1) and $driver already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install_chromium: no apt-get here; install Chromium and chromedriver yourself (tests/test_docs.py skips its browser test without them)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; then
    echo "install_chromium: installed $(/usr/bin/chromium --version 2>/dev/null | head -1)"
else
    echo "install_chromium: apt-get could not install chromium chromium-driver; tests/test_docs.py will skip its browser test" >&2
fi
exit 0
