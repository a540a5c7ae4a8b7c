import type { RetrievalResult, ScoredItem } from './types';
import { escapeHtml, formatUtility, makeNonce, page } from './html';
import type { RenderOptions } from './memoryView';

function card(item: ScoredItem): string {
    return `<section class="item" data-item-id="${item.id}">
<h3>${escapeHtml(item.title)} <span class="muted">#${item.id} · ${escapeHtml(item.kind)}</span></h3>
<p class="muted">utility ${formatUtility(item.utility)} · adopted ${item.n_adopted}× · similarity ${item.similarity.toFixed(2)} · score ${item.score.toFixed(2)}</p>
<pre>${escapeHtml(item.content)}</pre>
${item.code ? `<pre><code>${escapeHtml(item.code)}</code></pre>` : ''}
</section>`;
}

/** The rules an episode showed for this file's task, as the agent would see them. */
export function renderRetrievalHtml(task: string, retrieval: RetrievalResult, options: RenderOptions = {}): string {
    const nonce = options.nonce ?? makeNonce();
    const filtered = Object.entries(retrieval.filtered_out)
        .map(([reason, n]) => `${n} ${reason}`)
        .join(', ');
    const body = `<h1>Rules for ${escapeHtml(task)}</h1>
<p class="muted">episode ${retrieval.episode_id} · ${retrieval.tokens} tokens${filtered ? ` · filtered out: ${escapeHtml(filtered)}` : ''}</p>
<h2>Resident rules</h2>
${retrieval.resident_rules.length ? retrieval.resident_rules.map(card).join('\n') : '<p class="muted">None yet.</p>'}
<h2>Retrieved items</h2>
${retrieval.items.length ? retrieval.items.map(card).join('\n') : '<p class="muted">Nothing relevant in memory yet.</p>'}
<p class="muted">After benchmarking, run “SAGE: Record adoption” to say which of these you used.</p>`;
    return page(`Rules for ${task}`, body, nonce, options.cspSource ?? "'self'");
}
