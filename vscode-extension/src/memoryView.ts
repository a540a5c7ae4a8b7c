import type { Item } from './types';
import { escapeHtml, formatUtility, makeNonce, page } from './html';

export interface RenderOptions {
    nonce?: string;
    cspSource?: string;
}

// Buttons sit under each title, where a narrow panel cannot push them out of
// sight, and post {command, id} back to the extension, which asks before it
// deletes (webviews cannot show modal dialogs themselves).
const SCRIPT = `
const api = typeof acquireVsCodeApi === 'function' ? acquireVsCodeApi() : undefined;
document.addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action]');
    if (button && api) {
        api.postMessage({ command: button.dataset.action, id: Number(button.dataset.id) });
    }
});`;

function plural(n: number, noun: string): string {
    return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

function provenance(item: Item): string {
    const parts: string[] = [];
    if (item.source_episode != null) {
        parts.push(`episode ${item.source_episode}`);
    }
    if (item.source_attempt != null) {
        parts.push(`attempt ${item.source_attempt}`);
    }
    if (item.derived_from.length > 0) {
        parts.push(`from items ${item.derived_from.join(', ')}`);
    }
    const tags = [...new Set([item.operator, item.family, item.backend, item.hardware].filter((t) => t))];
    if (tags.length > 0) {
        parts.push(tags.join(' · '));
    }
    parts.push(`scope ${item.scope}`);
    return parts.map(escapeHtml).join('<br>');
}

function row(item: Item): string {
    const utilityClass = item.utility >= 0 ? 'pos' : 'neg';
    const operators = item.operators_adopted.length > 0 ? ` <span class="muted">(${escapeHtml(item.operators_adopted.join(', '))})</span>` : '';
    return `<tr data-item-id="${item.id}">
<td class="num">${item.id}</td>
<td><details><summary class="title">${escapeHtml(item.title)}</summary><pre>${escapeHtml(item.content)}</pre>${
        item.code ? `<pre><code>${escapeHtml(item.code)}</code></pre>` : ''
    }</details><span class="muted">${escapeHtml(item.kind)} · ${escapeHtml(item.status)} · ${item.tokens} tokens</span>
<div class="actions"><button data-action="quarantine" data-id="${item.id}" title="Never show this item again (kept for the audit trail)">Quarantine</button><button data-action="delete" data-id="${item.id}">Delete</button></div></td>
<td class="num utility ${utilityClass}">${formatUtility(item.utility)}</td>
<td class="num adoptions">${item.n_adopted} / ${item.n_retrieved}${operators}</td>
<td class="num">${Math.round(item.adoption_rate * 100)}%</td>
<td class="provenance">${provenance(item)}</td>
</tr>`;
}

function table(caption: string, id: string, items: Item[], empty: string): string {
    if (items.length === 0) {
        return `<h2>${escapeHtml(caption)}</h2><p class="muted" id="${id}-empty">${escapeHtml(empty)}</p>`;
    }
    return `<h2>${escapeHtml(caption)}</h2>
<table id="${id}">
<thead><tr><th>id</th><th>title</th><th>utility</th><th>adopted / shown</th><th>adoption rate</th><th>provenance</th></tr></thead>
<tbody>
${items.map(row).join('\n')}
</tbody>
</table>`;
}

/** The memory view: resident rules first (every task sees them), then the retrievable items. */
export function renderMemoryHtml(items: Item[], rules: Item[], options: RenderOptions = {}): string {
    const nonce = options.nonce ?? makeNonce();
    const tokens = rules.reduce((sum, r) => sum + r.tokens, 0);
    const body = `<h1>SAGE memory</h1>
<p class="muted">${plural(rules.length, 'resident rule')} (${tokens} tokens) · ${plural(items.length, 'retrievable item')}</p>
${table('Resident rules', 'rules', rules, 'No resident rules yet: consolidation promotes items that keep helping across operators.')}
${table('Items', 'items', items, 'No items yet: record adoption with a lesson after an evaluation.')}`;
    return page('SAGE memory', body, nonce, options.cspSource ?? "'self'", SCRIPT);
}
