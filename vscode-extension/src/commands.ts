import type { Middleware } from 'vscode-languageclient/node';
import { ClientCommand, ServerCommand } from './constants';
import { renderMemoryHtml } from './memoryView';
import { Panels } from './panels';
import { renderProfileHtml } from './profileView';
import { renderRetrievalHtml } from './retrievalView';
import type { SageServer } from './server';
import type { ResultStatus } from './statusBar';
import type { MemoryListing, ResultSummary, RetrievalResult, TaskChoice } from './types';
import {
    activeTextEditor,
    registerCommand,
    showErrorMessage,
    showInformationMessage,
    showInputBox,
    showQuickPick,
    showWarningMessage,
    withProgress,
} from './vscodeapi';
import type { Disposable } from 'vscode';

export const MEMORY_VIEW = 'sage.memory';
export const RULES_VIEW = 'sage.rules';
export const PROFILE_VIEW = 'sage.profile';

interface Retrieval {
    task: string;
    retrieval: RetrievalResult;
}

/**
 * The palette commands. Each one is a thin shell over one server command;
 * the language server owns the engine, these only ask and show.
 */
export class SageCommands {
    readonly panels = new Panels();
    /** The last retrieval per document: what "Record adoption" offers to adopt from. */
    private readonly retrievals = new Map<string, Retrieval>();

    constructor(
        private readonly server: () => SageServer | undefined,
        private readonly status: ResultStatus,
        private readonly restart: () => Promise<void>,
        private readonly refreshStatus: () => Promise<void> = async () => undefined,
    ) {}

    register(): Disposable[] {
        return [
            registerCommand(ClientCommand.benchmarkKernel, () => this.benchmark(true)),
            registerCommand(ClientCommand.benchmarkFile, () => this.benchmark(false)),
            registerCommand(ClientCommand.cancelBenchmarkFile, () => this.cancelBenchmark()),
            registerCommand(ClientCommand.showRules, () => this.showRules()),
            registerCommand(ClientCommand.adopt, () => this.adopt()),
            registerCommand(ClientCommand.consolidateMemory, () => this.consolidate()),
            registerCommand(ClientCommand.showMemory, () => this.showMemory()),
            registerCommand(ClientCommand.pickTask, (uri?: string) => this.pickTask(uri)),
            registerCommand(ClientCommand.restartServer, () => this.restart()),
            registerCommand(ClientCommand.showProfile, () => this.showProfile()),
        ];
    }

    /**
     * Lenses call server commands directly; this middleware fills in what
     * only the editor can (the task picked from a list) and shows the result.
     */
    middleware(): Middleware {
        return {
            // The status bar follows the lens: whenever VS Code asks for the
            // active file's lenses (an edit, a refresh after any evaluation,
            // benchmark-on-save included), the status bar is read again too.
            provideCodeLenses: async (document, token, next) => {
                const lenses = await next(document, token);
                if (activeTextEditor()?.document.uri.toString() === document.uri.toString()) {
                    void this.refreshStatus();
                }
                return lenses;
            },
            executeCommand: async (command, args, next) => {
                if (command === ServerCommand.setTask && args.length < 2) {
                    return this.pickTask(args[0]);
                }
                const result = await next(command, args);
                if (command === ServerCommand.benchmark) {
                    this.status.show(result as ResultSummary);
                }
                return result;
            },
        };
    }

    async benchmark(atCursor: boolean): Promise<ResultSummary | undefined> {
        const editor = activeTextEditor();
        const server = this.requireServer();
        if (!editor || !server) {
            if (!editor) {
                void showErrorMessage('SAGE: open a kernel file to benchmark it.');
            }
            return undefined;
        }
        const uri = editor.document.uri.toString();
        const args: unknown[] = atCursor ? [uri, editor.selection.active.line] : [uri];
        this.status.showRunning(uri);
        try {
            const summary = await server.execute<ResultSummary>(ServerCommand.benchmark, args);
            this.status.show(summary);
            return summary;
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
            await this.refreshStatus();
            return undefined;
        }
    }

    /** Cancel the active file's running evaluation (the status bar's click while one runs). */
    async cancelBenchmark(): Promise<void> {
        const editor = activeTextEditor();
        const server = this.requireServer();
        const uri = editor?.document.uri.toString() ?? this.status.uri;
        if (!uri || !server) {
            return;
        }
        try {
            const answer = await server.execute<{ cancelled: boolean; message: string }>(ServerCommand.cancelBenchmark, [uri]);
            void showInformationMessage(`SAGE: ${answer.message}`);
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
        }
        await this.refreshStatus();
    }

    async showRules(): Promise<Retrieval | undefined> {
        const editor = activeTextEditor();
        const server = this.requireServer();
        if (!editor || !server) {
            return undefined;
        }
        const uri = editor.document.uri.toString();
        try {
            const found = await server.execute<Retrieval>(ServerCommand.retrieveRules, [uri]);
            this.retrievals.set(uri, found);
            this.panels.show(RULES_VIEW, `SAGE rules: ${found.task}`, (nonce, cspSource) =>
                renderRetrievalHtml(found.task, found.retrieval, { nonce, cspSource }),
            );
            return found;
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
            return undefined;
        }
    }

    async adopt(): Promise<unknown> {
        const editor = activeTextEditor();
        const server = this.requireServer();
        if (!editor || !server) {
            return undefined;
        }
        const uri = editor.document.uri.toString();
        const shown = this.retrievals.get(uri);
        if (!shown) {
            void showErrorMessage(
                'SAGE: run "SAGE: Retrieve rules for this task" first; adoption is recorded against what an episode showed.',
            );
            return undefined;
        }
        if (!(await this.evaluatedIn(server, uri, shown.retrieval.episode_id))) {
            return undefined;
        }
        const choices = [...shown.retrieval.resident_rules, ...shown.retrieval.items].map((item) => ({
            label: item.title,
            description: `#${item.id} · utility ${item.utility.toFixed(2)}`,
            id: item.id,
        }));
        const picked = await showQuickPick(choices, {
            canPickMany: true,
            title: 'Which of the shown rules did this kernel use?',
        });
        if (picked === undefined) {
            return undefined;
        }
        const lesson = await showInputBox({
            title: 'What did you learn? (optional, becomes a memory item)',
            placeHolder: 'e.g. Tile the row so each block fits in UB',
        });
        try {
            const report = await server.execute<{ reward: number | null; updates: unknown[]; closed: boolean; credited: boolean }>(
                ServerCommand.recordAdoption,
                [uri, picked.map((p) => p.id), shown.retrieval.episode_id, lesson ? { title: lesson.slice(0, 120), content: lesson } : null],
            );
            this.retrievals.delete(uri);
            await this.refreshMemory();
            const episode = shown.retrieval.episode_id;
            void showInformationMessage(report.credited === false
                // No evaluation ran in the episode: the adoptions are kept but nothing is credited.
                ? `SAGE: episode ${episode} closed without credit: no kernel was evaluated in it, so no utility changed. Benchmark the kernel ("SAGE: Benchmark file") before recording adoption.`
                : `SAGE: episode ${episode} closed, reward ${report.reward == null ? 'pending' : report.reward.toFixed(2)}, ${report.updates.length} utilities updated.`);
            return report;
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
            return undefined;
        }
    }

    async consolidate(): Promise<unknown> {
        const server = this.requireServer();
        if (!server) {
            return undefined;
        }
        try {
            const report = await withProgress('SAGE: consolidating memory', () =>
                server.execute<{ promoted: number[]; demoted: number[]; rulebook: unknown[]; tokens: number }>(ServerCommand.consolidate, []),
            );
            await this.refreshMemory();
            void showInformationMessage(
                `SAGE: promoted ${report.promoted.length}, demoted ${report.demoted.length}; rulebook ${report.rulebook.length} rules, ${report.tokens} tokens.`,
            );
            return report;
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
            return undefined;
        }
    }

    /**
     * Whether the file's last evaluation ran inside `episode` (only such an
     * evaluation is credited). If it ran before the rules were retrieved,
     * offer to benchmark again inside the episode, or to close it without credit.
     */
    private async evaluatedIn(server: SageServer, uri: string, episode: number): Promise<boolean> {
        const last = await server.execute<ResultSummary | null>(ServerCommand.lastResult, [uri]);
        if (last?.result?.episode_id === episode) {
            return true;
        }
        const benchmark = 'Benchmark, then record';
        const answer = await showWarningMessage(
            last?.result
                ? `SAGE: this file's last benchmark ran before the rules were retrieved, outside episode ${episode}; only an evaluation inside the episode is credited.`
                : `SAGE: this file has not been benchmarked in episode ${episode}; only an evaluation inside the episode is credited.`,
            benchmark,
            'Record without credit',
        );
        if (answer === benchmark) {
            const summary = await this.benchmark(false);
            return summary?.result?.episode_id === episode;
        }
        return answer !== undefined;
    }

    /** Re-render the memory view where it is open, after something changed what it lists. */
    private async refreshMemory(): Promise<void> {
        if (this.panels.get(MEMORY_VIEW)) {
            await this.showMemory();
        }
    }

    /** The last result's roofline as SVG markup; none (the tables alone) from a server without the command. */
    private async roofline(server: SageServer, uri: string): Promise<string | null> {
        try {
            return await server.execute<string | null>(ServerCommand.roofline, [uri]);
        } catch {
            return null;
        }
    }

    /** Where the active file's last evaluation spent its time, in a panel. */
    async showProfile(): Promise<ResultSummary | undefined> {
        const editor = activeTextEditor();
        const server = this.requireServer();
        if (!editor || !server) {
            if (!editor) {
                void showErrorMessage('SAGE: open a kernel file to see where its time goes.');
            }
            return undefined;
        }
        const uri = editor.document.uri.toString();
        try {
            const summary = await server.execute<ResultSummary | null>(ServerCommand.lastResult, [uri]);
            const result = summary?.result ?? null;
            const roofline = result?.profile ? await this.roofline(server, uri) : null;
            const title = result ? `SAGE profile: ${result.task}` : 'SAGE profile';
            this.panels.show(PROFILE_VIEW, title, (nonce, cspSource) => renderProfileHtml(uri, result, { nonce, cspSource, roofline }));
            return summary ?? undefined;
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
            return undefined;
        }
    }

    async showMemory(): Promise<MemoryListing | undefined> {
        const server = this.requireServer();
        if (!server) {
            return undefined;
        }
        try {
            const listing = await server.execute<MemoryListing>(ServerCommand.memory, []);
            this.panels.show(
                MEMORY_VIEW,
                'SAGE memory',
                (nonce, cspSource) => renderMemoryHtml(listing.items, listing.rules, { nonce, cspSource }),
                (message) => this.onMemoryMessage(message),
            );
            return listing;
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
            return undefined;
        }
    }

    async onMemoryMessage(message: { command?: string; id?: number }): Promise<void> {
        const server = this.requireServer();
        if (!server || typeof message?.id !== 'number') {
            return;
        }
        if (message.command === 'delete') {
            const answer = await showWarningMessage(`Delete memory item #${message.id}? It stays in the audit trail.`, 'Delete');
            if (answer !== 'Delete') {
                return;
            }
        } else if (message.command !== 'quarantine') {
            return;
        }
        const command = message.command === 'delete' ? ServerCommand.delete : ServerCommand.quarantine;
        try {
            await server.execute(command, [message.id]);
            await this.showMemory();
        } catch (err) {
            void showErrorMessage(`SAGE: ${messageOf(err)}`);
        }
    }

    async pickTask(uri?: string): Promise<unknown> {
        const target = uri ?? activeTextEditor()?.document.uri.toString();
        const server = this.requireServer();
        if (!target || !server) {
            return undefined;
        }
        const tasks = byFileName(await server.execute<TaskChoice[]>(ServerCommand.listTasks, []), target);
        const other = { label: '$(edit) Another task id or a reference file path…', id: '' };
        const picked = await showQuickPick(
            [...tasks.map((t) => ({ label: t.id, description: `${t.name} · level ${t.level}`, id: t.id })), other],
            { title: 'Which task does this kernel implement?', matchOnDescription: true },
        );
        if (!picked) {
            return undefined;
        }
        const task = picked.id || (await showInputBox({ title: 'Task id or path to a reference .py file' }));
        if (!task) {
            return undefined;
        }
        return server.execute(ServerCommand.setTask, [target, task]);
    }

    private requireServer(): SageServer | undefined {
        const server = this.server();
        if (!server) {
            void showErrorMessage('SAGE: the language server is not running. Check the "SAGE" output channel, then run "SAGE: Restart server".');
        }
        return server;
    }

    dispose(): void {
        this.panels.dispose();
    }
}

/** The tasks the file is named after first (`softmax_fast.py`: softmax), the rest in the server's order. */
export function byFileName(tasks: TaskChoice[], uri: string): TaskChoice[] {
    const stem = decodeURIComponent(uri.split('/').pop() ?? '').replace(/\.[^.]*$/, '').toLowerCase();
    const words = stem.split(/[^a-z0-9]+/).filter((w) => w);
    const rank = (t: TaskChoice): number => {
        const id = t.id.toLowerCase();
        if (id === stem) return 0;
        if (stem.startsWith(id) || words.includes(id)) return 1;
        return stem.includes(id) ? 2 : 3;
    };
    return tasks.map((t, i) => ({ t, i, r: rank(t) })).sort((a, b) => a.r - b.r || a.i - b.i).map((x) => x.t);
}

function messageOf(err: unknown): string {
    return err instanceof Error ? err.message : String(err);
}
