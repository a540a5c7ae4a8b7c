import type { Readable } from 'node:stream';
import * as readline from 'node:readline';
import type { LogOutputChannel } from 'vscode';
import {
    CloseAction,
    CloseHandlerResult,
    ErrorAction,
    ErrorHandler,
    LanguageClient,
    LanguageClientOptions,
    Middleware,
    ServerOptions,
    TransportKind,
} from 'vscode-languageclient/node';
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

/**
 * `python -m sage_mcp.lsp` over stdio: vscode-languageclient appends
 * `--stdio` for this transport, which `sage-lsp` accepts (and refuses the
 * pipe, socket and node-ipc transports with a message naming stdio).
 */
export function serverOptions(info: ServerInfo, launch: ServerLaunch): ServerOptions {
    return {
        command: launch.interpreter,
        args: ['-m', info.module],
        transport: TransportKind.stdio,
        options: {
            cwd: launch.cwd,
            env: { ...process.env, ...serverEnvironment(launch.settings) },
            // Not killed 2 s after shutdown (the client's default for an attached
            // server): a server stopped by a window reload or a restart finishes the
            // evaluation in flight and stores it, then exits, and the new server shows it.
            detached: true,
        },
    };
}

const LEVEL = /^\S+ \S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) /;
const TAIL_LINES = 12;

/**
 * The server's stderr, line by line, into the output channel at the level
 * each line was logged at (`sage-lsp` logs `time name LEVEL message`; a
 * traceback's lines keep the level of the line that began it), and the last
 * lines kept to say why a server that could not start stopped.
 */
export class ServerLog {
    private readonly lines: string[] = [];
    private level = 'ERROR';

    pipe(input: Readable, channel: LogOutputChannel): void {
        readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on('line', (line) => this.write(line, channel));
    }

    write(line: string, channel: LogOutputChannel): void {
        this.lines.push(line);
        if (this.lines.length > TAIL_LINES) {
            this.lines.shift();
        }
        this.level = LEVEL.exec(line)?.[1] ?? this.level;
        switch (this.level) {
            case 'DEBUG':
                channel.debug(line);
                break;
            case 'INFO':
                channel.info(line);
                break;
            case 'WARNING':
                channel.warn(line);
                break;
            default:
                channel.error(line);
        }
    }

    /** The last lines the server wrote, most telling last ("" before any). */
    tail(n = 4): string {
        return this.lines.slice(-n).join('\n');
    }

    clear(): void {
        this.lines.length = 0;
        this.level = 'ERROR';
    }
}

/**
 * Restarts a server that stopped after it ran (up to 4 times in 3 minutes,
 * as vscode-languageclient's own handler does); a server that stopped before
 * it ever answered `initialize` is not restarted: the same command would fail
 * the same way, and `activate` tells the user why with the server's last words.
 */
export class SageErrorHandler implements ErrorHandler {
    running = false;
    private readonly restarts: number[] = [];

    constructor(private readonly log: ServerLog) {}

    error(): { action: ErrorAction } {
        return { action: ErrorAction.Continue };
    }

    closed(): CloseHandlerResult {
        if (!this.running) {
            return { action: CloseAction.DoNotRestart, handled: true };
        }
        const now = Date.now();
        this.restarts.push(now);
        while (this.restarts.length > 0 && now - this.restarts[0] > 3 * 60_000) {
            this.restarts.shift();
        }
        if (this.restarts.length <= 4) {
            return { action: CloseAction.Restart };
        }
        this.running = false;
        const why = this.log.tail();
        return {
            action: CloseAction.DoNotRestart,
            message: `The SAGE language server stopped 5 times in 3 minutes and will not be restarted.${why ? ` Its last words:\n${why}` : ''}`,
        };
    }
}

export function createClient(info: ServerInfo, launch: ServerLaunch, log: ServerLog, errorHandler: ErrorHandler): LanguageClient {
    const clientOptions: LanguageClientOptions = {
        documentSelector: DOCUMENT_SELECTOR,
        outputChannel: launch.outputChannel,
        traceOutputChannel: launch.outputChannel,
        middleware: launch.middleware,
        initializationOptions: languageServerSettings(launch.settings),
        errorHandler,
        stdioOptions: {
            stdout: (input, channel) => log.pipe(input, channel),
            stderr: (input, channel) => log.pipe(input, channel),
        },
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
