import type { LogOutputChannel } from 'vscode';
import { LanguageClient, LanguageClientOptions, Middleware, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import type { ServerInfo } from './constants';
import type { SageSettings } from './settings';
import { languageServerSettings, serverEnvironment } from './settings';

/** The files SAGE looks for kernels in: Python candidates and C/C++ (Ascend C) sources. */
export const DOCUMENT_SELECTOR = [
    { scheme: 'file', language: 'python' },
    { scheme: 'file', language: 'cpp' },
    { scheme: 'file', language: 'c' },
    { scheme: 'untitled', language: 'python' },
];

export interface ServerLaunch {
    interpreter: string;
    settings: SageSettings;
    cwd?: string;
    outputChannel: LogOutputChannel;
    middleware: Middleware;
}

export function serverOptions(info: ServerInfo, launch: ServerLaunch): ServerOptions {
    return {
        command: launch.interpreter,
        args: ['-m', info.module],
        transport: TransportKind.stdio,
        options: {
            cwd: launch.cwd,
            env: { ...process.env, ...serverEnvironment(launch.settings) },
        },
    };
}

export function createClient(info: ServerInfo, launch: ServerLaunch): LanguageClient {
    const clientOptions: LanguageClientOptions = {
        documentSelector: DOCUMENT_SELECTOR,
        outputChannel: launch.outputChannel,
        traceOutputChannel: launch.outputChannel,
        middleware: launch.middleware,
        initializationOptions: languageServerSettings(launch.settings),
    };
    return new LanguageClient(info.id, info.name, serverOptions(info, launch), clientOptions);
}

/** A started language server the commands talk to. */
export interface SageServer {
    execute<T = unknown>(command: string, args: unknown[]): Promise<T>;
}

export function asSageServer(client: LanguageClient): SageServer {
    return {
        execute: <T>(command: string, args: unknown[]) =>
            client.sendRequest('workspace/executeCommand', { command, arguments: args }) as Promise<T>,
    };
}
