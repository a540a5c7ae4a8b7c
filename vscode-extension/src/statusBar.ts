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
    if (summary?.running) {
        return {
            text: '$(sync~spin) SAGE: benchmarking…',
            tooltip: 'A SAGE evaluation of this file is running (its progress is in the notification). Click to cancel it.',
        };
    }
    if (!summary || !summary.result) {
        return { text: '$(beaker) SAGE', tooltip: 'No SAGE evaluation of this file yet. Click to benchmark it.' };
    }
    const r = summary.result;
    // A check mark only where the kernel is correct and no slower than the reference.
    const icon = !r.correct ? '$(error)' : r.speedup != null && r.speedup < 1 ? '$(arrow-down)' : '$(check)';
    const unverified = r.speedup_trusted === false ? ' (unverified)' : '';
    const headline = r.correct && r.speedup != null ? `${r.speedup.toFixed(2)}x${unverified}` : r.status.replace('_', ' ');
    const stale = summary.stale ? ' $(history)' : '';
    const where = r.profile?.summary ? `\nWhere the time goes: ${r.profile.summary}` : '';
    return { text: `${icon} SAGE ${headline}${stale}`, tooltip: summary.summary + where };
}

/** The status bar line while the language server is not running, and why. */
export function downText(reason: string): StatusText {
    return {
        text: '$(debug-disconnect) SAGE: server not running',
        tooltip: `The SAGE language server is not running, so no results can be shown.\n${reason}\nClick to restart it.`,
    };
}

export class ResultStatus {
    private readonly item: StatusBarItem;

    constructor() {
        this.item = createStatusBarItem();
        this.item.name = 'SAGE last result';
        this.item.command = ClientCommand.benchmarkFile;
        this.show(null);
    }

    /** The document the line describes (a summary's uri), so a late answer for another file is dropped. */
    uri: string | undefined;

    show(summary: ResultSummary | null | undefined, uri: string | undefined = summary?.uri): void {
        this.uri = uri;
        this.item.command = summary?.running ? ClientCommand.cancelBenchmarkFile : ClientCommand.benchmarkFile;
        this.set(statusText(summary));
    }

    /** An evaluation of `uri` has just been asked for: say so until its result (or the server's word) arrives. */
    showRunning(uri: string): void {
        this.show({ uri, task: null, summary: '', stale: false, running: true, result: null }, uri);
    }

    showDown(reason: string): void {
        this.uri = undefined;
        this.item.command = ClientCommand.restartServer;
        this.set(downText(reason));
    }

    private set({ text, tooltip }: StatusText): void {
        this.item.text = text;
        this.item.tooltip = tooltip;
        this.item.show();
    }

    dispose(): void {
        this.item.dispose();
    }
}
