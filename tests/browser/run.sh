#!/usr/bin/env bash
# The portal's browser tests (tests/browser/README.md): headless Debian Chromium driven by
# selenium through /usr/bin/chromedriver, against `target/debug/smsgw serve` on loopback.
# Called by .ci/run after `cargo test`; runs on its own too (it builds the binary if needed).
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

venv=target/browser-venv
if [ ! -x "$venv/bin/pytest" ] || ! cmp -s tests/browser/requirements.txt "$venv/requirements.txt"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/browser/requirements.txt
  cp tests/browser/requirements.txt "$venv/requirements.txt"
fi

cargo build --locked --bin smsgw
export PYTHONDONTWRITEBYTECODE=1
SMSGW_BIN="$PWD/target/debug/smsgw" exec "$venv/bin/python" -m pytest -p no:cacheprovider -q tests/browser "$@"
