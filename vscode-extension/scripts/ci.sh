#!/usr/bin/env bash
# The VS Code extension's checks: install, compile, unit and stdio tests,
# package the .vsix offline and load it. Run from anywhere.
# Needs Node 20+, npm, and Python with SAGE installed ($SAGE_PYTHON, default
# ../.venv/bin/python). The memory-view rendering test uses Debian's
# `chromium` when present (apt-get install -y chromium) and is skipped without it.
set -euo pipefail
cd "$(dirname "$0")/.."

export SAGE_PYTHON="${SAGE_PYTHON:-$(cd .. && pwd)/.venv/bin/python}"
if [[ ! -x "$SAGE_PYTHON" ]]; then
    echo "ci.sh: no Python at $SAGE_PYTHON; set SAGE_PYTHON to an interpreter with SAGE installed" >&2
    exit 1
fi

npm ci --no-audit --no-fund
npm run compile
npm test
mkdir -p dist
npx vsce package --allow-missing-repository --skip-license -o dist/sage-kernels.vsix
node scripts/check-vsix.js dist/sage-kernels.vsix
