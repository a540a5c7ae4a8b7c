'use strict';
// Stand-in for `vscode-languageclient/node`, whose LanguageClient needs a
// running VS Code. Two modes:
//  - scripted: requests are answered by `LanguageClient.respond(method, params)`
//    and recorded, for unit tests of the extension's wiring;
//  - stdio: the client really spawns the configured server command and speaks
//    LSP to it over stdio with vscode-languageserver-protocol (the library the
//    real client is built on), opening the active document first.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const {
    createProtocolConnection,
    StreamMessageReader,
    StreamMessageWriter,
} = require('vscode-languageserver-protocol/node');

const instances = [];
const TransportKind = { stdio: 0, ipc: 1, pipe: 2, socket: 3 };

class LanguageClient {
    constructor(id, name, serverOptions, clientOptions) {
        Object.assign(this, { id, name, serverOptions, clientOptions });
        this.requests = [];
        this.started = false;
        this.stopped = false;
        this.notifications = []; // from the server (stdio mode)
        this.sent = []; // notifications the extension sent
        this.stateListeners = [];
        instances.push(this);
    }

    onDidChangeState(listener) {
        this.stateListeners.push(listener);
        return { dispose: () => (this.stateListeners = this.stateListeners.filter((l) => l !== listener)) };
    }

    async dispose() {
        this.disposed = true;
    }

    async start() {
        if (LanguageClient.failStart) {
            throw new Error(LanguageClient.failStart);
        }
        this.started = true;
        if (LanguageClient.mode === 'stdio') {
            await this._startStdio();
        }
    }

    async stop() {
        this.stopped = true;
        if (this.connection) {
            await this.connection.sendRequest('shutdown');
            await this.connection.sendNotification('exit');
            this.connection.dispose();
            await this.exited;
        }
    }

    async sendRequest(method, params) {
        this.requests.push({ method, params });
        if (this.connection) {
            return this.connection.sendRequest(method, params);
        }
        return LanguageClient.respond(method, params);
    }

    async sendNotification(method, params) {
        this.sent.push({ method, params });
        if (this.connection) {
            await this.connection.sendNotification(method, params);
        }
    }

    async _startStdio() {
        const { command, args, options, transport } = this.serverOptions;
        // As vscode-languageclient does for an executable on the stdio transport.
        const argv = transport === TransportKind.stdio ? [...args, '--stdio'] : args;
        const proc = spawn(command, argv, { cwd: options.cwd, env: options.env, stdio: ['pipe', 'pipe', 'pipe'] });
        this.stderr = '';
        proc.stderr.on('data', (d) => (this.stderr += d.toString()));
        const pipe = this.clientOptions.stdioOptions?.stderr;
        if (pipe) {
            pipe(proc.stderr, this.clientOptions.outputChannel);
        }
        this.exited = new Promise((resolve) => proc.on('exit', resolve));
        const died = this.exited.then((code) => {
            throw new Error(`Server process exited with code ${code}.`);
        });
        const connection = createProtocolConnection(new StreamMessageReader(proc.stdout), new StreamMessageWriter(proc.stdin));
        connection.onRequest('workspace/codeLens/refresh', () => null);
        connection.onRequest('window/workDoneProgress/create', () => null);
        connection.onRequest('workspace/applyEdit', () => ({ applied: false }));
        connection.onNotification((method, params) => this.notifications.push({ method, params }));
        connection.listen();
        this.connection = connection;
        const root = options.cwd;
        const initialize = connection.sendRequest('initialize', {
            processId: process.pid,
            rootUri: root ? `file://${root}` : null,
            workspaceFolders: root ? [{ uri: `file://${root}`, name: 'ws' }] : null,
            initializationOptions: this.clientOptions.initializationOptions,
            capabilities: {
                window: { workDoneProgress: true },
                workspace: { codeLens: { refreshSupport: true }, applyEdit: true },
                textDocument: { codeLens: {}, hover: { contentFormat: ['markdown'] }, publishDiagnostics: {} },
            },
        });
        // A server that exits before it answers fails start(), as with the real client.
        await Promise.race([initialize, died]);
        died.catch(() => undefined);
        await connection.sendNotification('initialized', {});
        const editor = require('vscode').window.activeTextEditor;
        if (editor) {
            const doc = editor.document;
            await connection.sendNotification('textDocument/didOpen', {
                textDocument: { uri: doc.uri.toString(), languageId: doc.languageId, version: 1, text: fs.readFileSync(doc.uri.fsPath, 'utf8') },
            });
        }
    }
}

LanguageClient.mode = 'scripted';
LanguageClient.failStart = undefined;
LanguageClient.respond = async (method, params) => {
    throw new Error(`no scripted response for ${method} ${JSON.stringify(params)}`);
};
LanguageClient.instances = instances;

module.exports = {
    LanguageClient,
    TransportKind,
    State: { Stopped: 1, Starting: 3, Running: 2 },
    ErrorAction: { Continue: 1, Shutdown: 2 },
    CloseAction: { DoNotRestart: 1, Restart: 2 },
};
