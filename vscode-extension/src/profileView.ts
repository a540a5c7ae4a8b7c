import type { EvalResult, KernelTime, SideProfile } from './types';
import { escapeHtml, makeNonce, page } from './html';
import type { RenderOptions } from './memoryView';

const BOUND: Record<string, string> = {
    memory: 'memory-bound',
    compute: 'compute-bound',
    latency: 'launch/latency-bound',
};

function share(value: number | null | undefined): string {
    return value == null ? '–' : `${Math.round(value * 100)}%`;
}

function num(value: number | null | undefined, scale = 1, digits = 1): string {
    return value == null ? '–' : (value / scale).toFixed(digits);
}

function bytes(n: number | null | undefined): string {
    if (!n) {
        return '–';
    }
    for (const [unit, size] of [['GiB', 2 ** 30], ['MiB', 2 ** 20], ['KiB', 2 ** 10]] as const) {
        if (n >= size) {
            return `${(n / size).toFixed(1)} ${unit}`;
        }
    }
    return `${n} B`;
}

function kernelRows(side: string, kernels: KernelTime[]): string {
    return kernels
        .map((k) => `<tr><td>${side}</td><td><code>${escapeHtml(k.name)}</code></td><td class="num">${num(k.launches)}</td><td class="num">${num(k.time_us)}</td></tr>`)
        .join('\n');
}

/** Kernel time a call against the timed median: the share, marked when they disagree by more than 10%. */
function agreement(side: SideProfile): string {
    if (side.agreement == null) {
        return '–';
    }
    const text = `${Math.round(side.agreement * 100)}%`;
    return Math.abs(side.agreement - 1) > 0.1 ? `<span class="neg" title="${escapeHtml(side.agreement_note ?? '')}">${text}</span>` : text;
}

/**
 * The server's roofline SVG, inline, or nothing. SAGE's renderer draws with
 * presentation attributes only, so the page's content security policy stays as
 * it is; markup that could run or fetch anything is refused whole.
 */
export function inlineSvg(markup: string | null | undefined): string {
    const svg = (markup ?? '').trim();
    if (!/^<svg[\s>]/.test(svg) || !svg.endsWith('</svg>')) {
        return '';
    }
    if (/<script|<foreignObject|<iframe|<image|<use|\son[a-z]+\s*=|javascript:|(?:href|src)\s*=/i.test(svg)) {
        return '';
    }
    return svg;
}

export interface ProfileOptions extends RenderOptions {
    /** The result's roofline (`sage.roofline`), drawn above the tables. */
    roofline?: string | null;
}

function row(label: string, ref: string, cand: string): string {
    return `<tr><th>${label}</th><td class="num">${ref}</td><td class="num">${cand}</td></tr>`;
}

/** Where the last evaluation's time went: the sentence, both sides against the machine's limits, their kernels. */
export function renderProfileHtml(uri: string, result: EvalResult | null, options: ProfileOptions = {}): string {
    const nonce = options.nonce ?? makeNonce();
    const p = result?.profile;
    if (!result || !p) {
        const body = `<h1>Where the time goes</h1>
<p class="muted">No profile for ${escapeHtml(uri)} yet: only a correct, timed candidate is profiled. Benchmark it first.</p>`;
        return page('Where the time goes', body, nonce, options.cspSource ?? "'self'");
    }
    const empty: SideProfile = { kernels: [], launches: 0, kernel_us: 0, wall_us: 0, note: '' };
    const ref = p.reference ?? empty;
    const cand = p.candidate ?? empty;
    const ops = p.source === 'cpu-ops' ? 'torch ops' : 'kernels';
    const impossible = p.impossible
        ? `<p class="neg"><strong>Physically impossible time:</strong> ${escapeHtml(p.impossible)}</p>`
        : '';
    const chart = inlineSvg(options.roofline);
    const body = `<h1>Where the time goes: ${escapeHtml(result.task)}</h1>
<p class="bound"><strong>${escapeHtml(BOUND[p.bound ?? ''] ?? 'no measured limits')}</strong> · ${escapeHtml(p.summary)}</p>
${impossible}
${chart ? `<div class="chart">${chart}</div>` : ''}
<table>
<tr><th></th><th>reference</th><th>candidate</th></tr>
${row('median (timed)', `${num(result.reference_timing?.median_ms, 1, 4)} ms`, `${num(result.candidate_timing?.median_ms, 1, 4)} ms`)}
${row(`${ops} a call`, num(ref.launches), num(cand.launches))}
${row(`${ops}' time a call (µs)`, num(ref.kernel_us), num(cand.kernel_us))}
${row(`${ops}' time over the timed median`, agreement(ref), agreement(cand))}
${row('achieved GB/s', num(ref.achieved_gbps, 1, 2), num(cand.achieved_gbps, 1, 2))}
${row('share of measured bandwidth', share(ref.bandwidth_share), share(cand.bandwidth_share))}
${row('achieved GFLOP/s', num(ref.achieved_flops, 1e9), num(cand.achieved_flops, 1e9))}
${row('share of matmul peak', share(ref.compute_share), share(cand.compute_share))}
${row('bound', escapeHtml(ref.bound ?? '–'), escapeHtml(cand.bound ?? '–'))}
</table>
<p class="muted">A call moves at least ${bytes(p.bytes)} (inputs plus outputs)${p.flops ? ` and does ${num(p.flops, 1e6)} MFLOP of matrix work` : ''}; measured on this machine: ${num(p.peak_gbps)} GB/s for that working set${p.peak_flops ? `, matmul peak ${num(p.peak_flops, 1e9)} GFLOP/s` : ''}.${p.calibration ? ` Limits: ${escapeHtml(p.calibration)}.` : ''}</p>
<h2>Kernels (${escapeHtml(p.source)})</h2>
<table>
<tr><th>side</th><th>kernel</th><th>launches a call</th><th>µs a call</th></tr>
${kernelRows('reference', ref.kernels)}
${kernelRows('candidate', cand.kernels)}
</table>
${p.notes.length ? `<ul class="muted">${p.notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ul>` : ''}`;
    return page(`Where the time goes: ${result.task}`, body, nonce, options.cspSource ?? "'self'");
}
