#!/usr/bin/env bash
# Install a real VS Code for the end-to-end test: code-server (VS Code 1.117
# served to a browser) from the npm registry, the Node 22 it requires (the
# `node` package from the npm registry), and playwright-core to drive Debian's
# Chromium. Everything comes from the npm registry and Debian's packages; the
# one file code-server's build would fetch from elsewhere (ripgrep's prebuilt
# binary) is Debian's ripgrep, put where that build looks for its download.
#
# Installed once per version into $SAGE_VSCODE_E2E_HOME (default
# ~/.cache/sage/vscode-e2e): a new checkout or CI run on the same machine
# reuses it (a first install builds code-server's native modules: about 6
# minutes on two cores). Prints the install folder on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
home="${SAGE_VSCODE_E2E_HOME:-$HOME/.cache/sage/vscode-e2e}"
key="$(sha256sum "$here/package.json" | cut -c1-12)"
dest="$home/$key"
if [ -f "$dest/.installed" ]; then
    echo "$dest"
    exit 0
fi

# Native modules need a compiler and Kerberos headers; VS Code's search needs rg.
debs=(build-essential pkg-config python3 libkrb5-dev ripgrep chromium)
missing=()
for pkg in "${debs[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "e2e/install.sh: missing Debian packages: ${missing[*]} (sudo apt-get install ${missing[*]})" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

rm -rf "$dest"
mkdir -p "$dest"
cp "$here/package.json" "$here/package-lock.json" "$dest/"
cd "$dest"
log="$dest/install.log"
# First without install scripts: Node 22 itself, then code-server's files.
npm ci --ignore-scripts --no-audit --no-fund >"$log" 2>&1 || { tail -30 "$log" >&2; exit 1; }
(cd node_modules/node && npm run preinstall --silent) >>"$log" 2>&1 || { tail -30 "$log" >&2; exit 1; }
node22="$dest/node_modules/node/bin"
"$node22/node" --version | grep -q '^v22\.' || { echo "e2e/install.sh: the node package gave no Node 22" >&2; exit 1; }

# ripgrep's "download", from Debian's binary, keyed as @vscode/ripgrep keys its cache.
shrinkwrap=node_modules/code-server/lib/vscode/npm-shrinkwrap.json
rg_pkg=$("$node22/node" -p "require('./$shrinkwrap').packages['node_modules/@vscode/ripgrep'].version")
npm pack --silent "@vscode/ripgrep@$rg_pkg" --pack-destination "$dest" >>"$log" 2>&1
rg_release=$(tar xzf "vscode-ripgrep-$rg_pkg.tgz" -O package/lib/postinstall.js | sed -n "s/^const VERSION = '\(.*\)';/\1/p")
export TMPDIR="$dest/tmp"
mkdir -p "$TMPDIR/vscode-ripgrep-cache-$rg_pkg" "$dest/rg"
cp "$(command -v rg)" "$dest/rg/rg"
tar czf "$TMPDIR/vscode-ripgrep-cache-$rg_pkg/ripgrep-$rg_release-x86_64-unknown-linux-musl.tar.gz" -C "$dest/rg" rg

# code-server's own install step (VS Code's dependencies, native builds) under Node 22.
(
    cd node_modules/code-server
    PATH="$node22:$PATH" npm_config_user_agent="npm/$(npm --version) node/$("$node22/node" --version) linux x64" \
        npm_config_unsafe_perm=true sh ./postinstall.sh
) >>"$log" 2>&1 || { tail -40 "$log" >&2; exit 1; }
rm -rf "$TMPDIR" "$dest/rg" "vscode-ripgrep-$rg_pkg.tgz"
touch "$dest/.installed"
echo "$dest"
