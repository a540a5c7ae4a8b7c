#!/usr/bin/env bash
# The VS Code extension's checks: install, compile, unit and stdio tests,
# package the .vsix offline and load it, then install that .vsix into a real
# VS Code (code-server, e2e/install.sh) and drive it from Chromium. Run from
# anywhere. Needs Node 20+, npm, and Python with SAGE installed ($SAGE_PYTHON,
# default ../.venv/bin/python). The rendering tests use Debian's `chromium`
# when present (apt-get install -y chromium) and are skipped without it;
# SAGE_SKIP_VSCODE_E2E=1 skips the real VS Code (and its first install, about
# 6 minutes on two cores), unless SAGE_TEST_REQUIRE names `vscode`.
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

if [[ "${SAGE_SKIP_VSCODE_E2E:-0}" == 1 && ",${SAGE_TEST_REQUIRE:-}," != *,vscode,* ]]; then
    echo "ci.sh: SAGE_SKIP_VSCODE_E2E=1: the real VS Code test is skipped" >&2
    exit 0
fi
SAGE_VSCODE_E2E_DIR="$(e2e/install.sh)"
export SAGE_VSCODE_E2E_DIR SAGE_VSIX="$PWD/dist/sage-kernels.vsix"
"$SAGE_VSCODE_E2E_DIR/node_modules/node/bin/node" --test e2e/*.test.js
