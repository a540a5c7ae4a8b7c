// Wiring only: settings, interpreter, the language client, commands, MCP.
import type { ExtensionContext, LogOutputChannel } from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { SageCommands } from './commands';
import { loadServerInfo, ServerCommand } from './constants';
import { registerMcpServer } from './mcp';
import { findInterpreter } from './python';
import { asSageServer, createClient, SageServer } from './server';
import { getSettings, languageServerSettings, LIVE_KEYS, RESTART_KEYS } from './settings';
import { ResultStatus } from './statusBar';
import type { ResultSummary } from './types';
import {
    activeTextEditor,
    createOutputChannel,
    getWorkspaceFolders,
    onDidChangeActiveTextEditor,
    onDidChangeConfiguration,
} from './vscodeapi';

let client: LanguageClient | undefined;
let server: SageServer | undefined;

export async function activate(context: ExtensionContext): Promise<void> {
    const info = loadServerInfo(context.extensionPath);
    const output = createOutputChannel(info.name);
    const folders = getWorkspaceFolders().map((f) => f.uri.fsPath);
    const settings = () => getSettings(undefined, folders[0]);
    const interpreter = () => findInterpreter(settings().pythonPath, folders);

    const status = new ResultStatus();
    const commands = new SageCommands(() => server, status, () => restart());
    const mcp = registerMcpServer(info, { interpreter, settings });

    async function restart(): Promise<void> {
        await stop();
        const python = await interpreter();
        output.info(`Starting ${python} -m ${info.module}`);
        const next = createClient(info, {
            interpreter: python,
            settings: settings(),
            cwd: folders[0],
            outputChannel: output,
            middleware: commands.middleware(),
        });
        try {
            await next.start();
        } catch (err) {
            output.error(`SAGE language server did not start: ${err}`);
            throw err;
        }
        client = next;
        server = asSageServer(next);
        await showLastResult(output, status);
    }

    context.subscriptions.push(
        output,
        status,
        commands,
        mcp.disposable,
        ...commands.register(),
        onDidChangeActiveTextEditor(() => void showLastResult(output, status)),
        onDidChangeConfiguration((e) => {
            if (RESTART_KEYS.some((key) => e.affectsConfiguration(key))) {
                mcp.changed();
                void restart();
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
        // Already logged; the extension stays active so "Restart server" works
        // once the interpreter setting is fixed.
    }
}

async function showLastResult(output: LogOutputChannel, status: ResultStatus): Promise<void> {
    const editor = activeTextEditor();
    if (!editor || !server) {
        status.show(null);
        return;
    }
    try {
        status.show(await server.execute<ResultSummary | null>(ServerCommand.lastResult, [editor.document.uri.toString()]));
    } catch (err) {
        output.warn(`SAGE: no last result for ${editor.document.uri.toString()}: ${err}`);
        status.show(null);
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
