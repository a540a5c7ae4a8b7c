// Wiring only: settings, interpreter, the language client, commands, MCP.
import type { ExtensionContext, LogOutputChannel, TextDocument } from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { SageCommands } from './commands';
import { loadServerInfo, ServerCommand } from './constants';
import { registerMcpServer } from './mcp';
import { findInterpreter } from './python';
import { asSageServer, createClient, SageErrorHandler, SageServer, ServerLog } from './server';
import { changedRestartKeys, getSettings, languageServerSettings, LIVE_KEYS, SageSettings } from './settings';
import { ResultStatus } from './statusBar';
import type { ResultSummary } from './types';
import {
    activeTextEditor,
    createOutputChannel,
    getWorkspaceFolders,
    onDidChangeActiveTextEditor,
    onDidChangeConfiguration,
    showErrorMessage,
    showInformationMessage,
} from './vscodeapi';

let client: LanguageClient | undefined;
let server: SageServer | undefined;

/** Documents the server can evaluate: files and unsaved editors, not Output panels or settings views. */
export function isKernelDocument(document: TextDocument | undefined): document is TextDocument {
    return document !== undefined && (document.uri.scheme === 'file' || document.uri.scheme === 'untitled');
}

export async function activate(context: ExtensionContext): Promise<void> {
    const info = loadServerInfo(context.extensionPath);
    const output = createOutputChannel(info.name);
    const folders = getWorkspaceFolders().map((f) => f.uri.fsPath);
    const settings = () => getSettings(undefined, folders[0]);
    const interpreter = () => findInterpreter(settings().pythonPath, folders);

    const status = new ResultStatus();
    const log = new ServerLog();
    const refreshStatus = () => showLastResult(output, status);
    const commands = new SageCommands(() => server, status, () => restart(), refreshStatus);
    const mcp = registerMcpServer(info, { interpreter, settings });
    let started: SageSettings = settings();

    async function restart(): Promise<void> {
        await stop();
        log.clear();
        started = settings();
        const python = await interpreter();
        output.info(`Starting ${python} -m ${info.module} (memory: ${started.databasePath || "SAGE's default"})`);
        const errorHandler = new SageErrorHandler(log);
        const next = createClient(
            info,
            { interpreter: python, settings: started, cwd: folders[0], outputChannel: output, middleware: commands.middleware() },
            log,
            errorHandler,
        );
        try {
            await next.start();
        } catch (err) {
            // The notification itself says why: the server's own last lines, not only "see the output".
            const why = log.tail() || String(err);
            output.error(`SAGE language server did not start: ${err}`);
            status.showDown(why);
            void showErrorMessage(`SAGE: the language server (${python} -m ${info.module}) did not start:\n${why}`);
            void next.dispose().catch(() => undefined);
            throw err;
        }
        errorHandler.running = true;
        next.onDidChangeState((e) => {
            // 1 = Stopped: the client gave up on a crashed server (or was stopped).
            if (e.newState === 1 && client === next) {
                server = undefined;
                status.showDown(log.tail() || 'it stopped');
            }
        });
        client = next;
        server = asSageServer(next);
        await refreshStatus();
    }

    context.subscriptions.push(
        output,
        status,
        commands,
        mcp.disposable,
        ...commands.register(),
        onDidChangeActiveTextEditor((editor) => {
            // Focusing a panel or the Output view is no reason to forget the kernel's result.
            if (isKernelDocument(editor?.document)) {
                void refreshStatus();
            }
        }),
        onDidChangeConfiguration((e) => {
            const moved = changedRestartKeys(started, settings());
            if (moved.length > 0) {
                // Only a setting whose value really moved restarts (a remote
                // window reloads machine settings without changing them).
                mcp.changed();
                void showInformationMessage(`SAGE: restarting the language server: ${moved.join(', ')} changed.`);
                void restart().catch(() => undefined);
            } else if (client && LIVE_KEYS.some((key) => e.affectsConfiguration(key))) {
                void client.sendNotification('workspace/didChangeConfiguration', {
                    settings: { sage: languageServerSettings(settings()) },
                });
            }
        }),
    );
    try {
        await restart();
    } catch {
        // Already shown; the extension stays active so "Restart server" works
        // once the interpreter setting is fixed.
    }
}

/** The status bar shows the active kernel file's last evaluation, the same one its lens shows. */
async function showLastResult(output: LogOutputChannel, status: ResultStatus): Promise<void> {
    const document = activeTextEditor()?.document;
    if (!isKernelDocument(document) || !server) {
        return;
    }
    const uri = document.uri.toString();
    try {
        const summary = await server.execute<ResultSummary | null>(ServerCommand.lastResult, [uri]);
        if (activeTextEditor()?.document.uri.toString() === uri) {
            status.show(summary, uri);
        }
    } catch (err) {
        output.warn(`SAGE: no last result for ${uri}: ${err}`);
        status.show(null, uri);
    }
}

async function stop(): Promise<void> {
    const running = client;
    client = undefined;
    server = undefined;
    if (running) {
        await running.stop();
    }
}

export async function deactivate(): Promise<void> {
    await stop();
}
