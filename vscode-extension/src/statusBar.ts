import type { StatusBarItem } from 'vscode';
import type { ResultSummary } from './types';
import { ClientCommand } from './constants';
import { createStatusBarItem } from './vscodeapi';

export interface StatusText {
    text: string;
    tooltip: string;
}

/** The status bar line for a file's last evaluation (pure, so it can be tested). */
export function statusText(summary: ResultSummary | null | undefined): StatusText {
    if (!summary || !summary.result) {
        return { text: '$(beaker) SAGE', tooltip: 'No SAGE evaluation of this file yet. Click to benchmark it.' };
    }
    const r = summary.result;
    const icon = r.correct ? '$(check)' : '$(error)';
    const unverified = r.speedup_trusted === false ? ' (unverified)' : '';
    const headline = r.correct && r.speedup != null ? `${r.speedup.toFixed(2)}x${unverified}` : r.status.replace('_', ' ');
    const stale = summary.stale ? ' $(history)' : '';
    const where = r.profile?.summary ? `\nWhere the time goes: ${r.profile.summary}` : '';
    return { text: `${icon} SAGE ${headline}${stale}`, tooltip: summary.summary + where };
}

export class ResultStatus {
    private readonly item: StatusBarItem;

    constructor() {
        this.item = createStatusBarItem();
        this.item.name = 'SAGE last result';
        this.item.command = ClientCommand.benchmarkFile;
        this.show(null);
    }

    show(summary: ResultSummary | null | undefined): void {
        const { text, tooltip } = statusText(summary);
        this.item.text = text;
        this.item.tooltip = tooltip;
        this.item.show();
    }

    dispose(): void {
        this.item.dispose();
    }
}
