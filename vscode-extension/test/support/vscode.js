'use strict';
// A hand-written stand-in for the `vscode` module: the real one exists only
// inside a running VS Code. It implements just what the extension calls and
// records every call in `calls` so tests can check what was asked for.

const calls = [];
const state = {
    configuration: {},
    workspaceFolders: [],
    activeTextEditor: undefined,
    quickPickAnswers: [],
    inputBoxAnswers: [],
    warningAnswers: [],
    extensions: {},
};
const listeners = { configuration: [], activeEditor: [] };

class Disposable {
    constructor(fn) {
        this._fn = fn;
    }
    dispose() {
        if (this._fn) this._fn();
        this._fn = undefined;
    }
}

class EventEmitter {
    constructor() {
        this._listeners = [];
        this.fired = 0;
        this.event = (listener) => {
            this._listeners.push(listener);
            return new Disposable(() => (this._listeners = this._listeners.filter((l) => l !== listener)));
        };
    }
    fire(value) {
        this.fired += 1;
        for (const l of [...this._listeners]) l(value);
    }
    dispose() {
        this._listeners = [];
    }
}

class Uri {
    constructor(scheme, fsPath) {
        this.scheme = scheme;
        this.fsPath = fsPath;
        this.path = fsPath;
    }
    static file(p) {
        return new Uri('file', p);
    }
    toString() {
        return `${this.scheme}://${this.fsPath.split('/').map(encodeURIComponent).join('/')}`;
    }
}

class McpStdioServerDefinition {
    constructor(label, command, args, env, version) {
        Object.assign(this, { label, command, args: args ?? [], env: env ?? {}, version });
    }
}

function record(name, args) {
    calls.push({ name, args });
}

const registeredCommands = new Map();

function makeWebviewPanel(viewType, title) {
    const received = [];
    const disposeListeners = [];
    const panel = {
        viewType,
        title,
        revealed: 0,
        disposed: false,
        webview: {
            html: '',
            cspSource: 'vscode-webview://stub',
            onDidReceiveMessage: (listener) => {
                received.push(listener);
                return new Disposable();
            },
            /** Test helper: what a click in the page would post. */
            simulateMessage: async (message) => {
                for (const l of received) await l(message);
            },
        },
        reveal() {
            panel.revealed += 1;
        },
        onDidDispose(listener) {
            disposeListeners.push(listener);
            return new Disposable();
        },
        dispose() {
            panel.disposed = true;
            for (const l of disposeListeners) l();
        },
    };
    return panel;
}

const vscode = {
    Disposable,
    EventEmitter,
    Uri,
    McpStdioServerDefinition,
    StatusBarAlignment: { Left: 1, Right: 2 },
    ViewColumn: { Active: -1, Beside: -2, One: 1 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    window: {
        createOutputChannel(name, options) {
            record('window.createOutputChannel', [name, options]);
            const lines = [];
            const log = (level) => (msg) => lines.push(`${level} ${msg}`);
            return {
                name, lines,
                info: log('info'), warn: log('warn'), error: log('error'), debug: log('debug'), trace: log('trace'),
                append: (s) => lines.push(s), appendLine: (s) => lines.push(s),
                show() {}, dispose() {},
            };
        },
        createStatusBarItem(id, alignment, priority) {
            record('window.createStatusBarItem', [id, alignment, priority]);
            const item = { id, alignment, priority, text: '', tooltip: '', command: undefined, visible: false,
                show() { item.visible = true; }, hide() { item.visible = false; }, dispose() {} };
            state.statusBarItem = item;
            return item;
        },
        get activeTextEditor() {
            return state.activeTextEditor;
        },
        onDidChangeActiveTextEditor(listener) {
            listeners.activeEditor.push(listener);
            return new Disposable();
        },
        showInformationMessage: async (message, ...rest) => {
            record('window.showInformationMessage', [message, ...rest]);
            return undefined;
        },
        showErrorMessage: async (message, ...rest) => {
            record('window.showErrorMessage', [message, ...rest]);
            return undefined;
        },
        showWarningMessage: async (message, ...rest) => {
            record('window.showWarningMessage', [message, ...rest]);
            return state.warningAnswers.shift();
        },
        showQuickPick: async (items, options) => {
            record('window.showQuickPick', [items, options]);
            const answer = state.quickPickAnswers.shift();
            return typeof answer === 'function' ? answer(items) : answer;
        },
        showInputBox: async (options) => {
            record('window.showInputBox', [options]);
            return state.inputBoxAnswers.shift();
        },
        withProgress: async (options, task) => {
            record('window.withProgress', [options]);
            return task({ report() {} }, { isCancellationRequested: false });
        },
        createWebviewPanel(viewType, title, column, options) {
            record('window.createWebviewPanel', [viewType, title, column, options]);
            const panel = makeWebviewPanel(viewType, title);
            // Beside the editor in the first group; VS Code numbers groups from 1.
            panel.viewColumn = column === vscode.ViewColumn.Beside ? 2 : column;
            (state.panels ??= []).push(panel);
            return panel;
        },
    },
    workspace: {
        get workspaceFolders() {
            return state.workspaceFolders;
        },
        getWorkspaceFolder(uri) {
            return state.workspaceFolders.find((f) => uri.fsPath.startsWith(f.uri.fsPath));
        },
        getConfiguration(section) {
            return {
                get: (key, fallback) => {
                    const value = state.configuration[`${section}.${key}`];
                    return value === undefined ? fallback : value;
                },
            };
        },
        onDidChangeConfiguration(listener) {
            listeners.configuration.push(listener);
            return new Disposable();
        },
    },
    commands: {
        registerCommand(id, callback) {
            if (registeredCommands.has(id)) throw new Error(`command '${id}' already exists`);
            registeredCommands.set(id, callback);
            return new Disposable(() => registeredCommands.delete(id));
        },
        executeCommand: async (id, ...args) => {
            const callback = registeredCommands.get(id);
            if (!callback) throw new Error(`command '${id}' not found`);
            return callback(...args);
        },
    },
    extensions: {
        getExtension: (id) => state.extensions[id],
    },
    lm: {
        registerMcpServerDefinitionProvider(id, provider) {
            record('lm.registerMcpServerDefinitionProvider', [id, provider]);
            (state.mcpProviders ??= new Map()).set(id, provider);
            return new Disposable(() => state.mcpProviders.delete(id));
        },
    },
};

/** Test helpers, not part of the vscode API. */
vscode.__stub = {
    calls,
    state,
    registeredCommands,
    changeConfiguration(changed) {
        for (const l of listeners.configuration) l({ affectsConfiguration: (key) => changed.includes(key) });
    },
    setActiveEditor(editor) {
        state.activeTextEditor = editor;
        for (const l of listeners.activeEditor) l(editor);
    },
    reset() {
        calls.length = 0;
        registeredCommands.clear();
        listeners.configuration.length = 0;
        listeners.activeEditor.length = 0;
        for (const key of Object.keys(state)) delete state[key];
        Object.assign(state, {
            configuration: {}, workspaceFolders: [], activeTextEditor: undefined,
            quickPickAnswers: [], inputBoxAnswers: [], warningAnswers: [], extensions: {},
        });
    },
};

module.exports = vscode;
