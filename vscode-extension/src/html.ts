const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Everything shown in a webview comes from memory items an agent wrote: escape it all. */
export function escapeHtml(value: unknown): string {
    return String(value ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

export function formatUtility(u: number): string {
    return (u >= 0 ? '+' : '') + u.toFixed(2);
}

export function page(title: string, body: string, nonce: string, cspSource: string, script = ''): string {
    const csp = [
        "default-src 'none'",
        `style-src ${cspSource} 'nonce-${nonce}'`,
        `script-src 'nonce-${nonce}'`,
    ].join('; ');
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style nonce="${nonce}">
body { font-family: var(--vscode-font-family, sans-serif); color: var(--vscode-foreground, #222); padding: 0 1em; }
table { border-collapse: collapse; width: 100%; margin-bottom: 1.5em; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--vscode-panel-border, #ccc); vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pos { color: var(--vscode-testing-iconPassed, #2a7a2a); }
.neg { color: var(--vscode-testing-iconFailed, #b22); }
.muted { color: var(--vscode-descriptionForeground, #666); font-size: 90%; }
details summary { cursor: pointer; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
td { overflow-wrap: anywhere; }
div.actions { margin-top: 4px; }
button { margin: 0 4px 4px 0; white-space: nowrap; }
svg.roofline { max-width: 100%; height: auto; }
</style>
</head>
<body>
${body}
${script ? `<script nonce="${nonce}">${script}</script>` : ''}
</body>
</html>`;
}

export function makeNonce(random: () => number = Math.random): string {
    const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
    let out = '';
    for (let i = 0; i < 32; i++) {
        out += chars[Math.floor(random() * chars.length)];
    }
    return out;
}
