// Every vscode.* call goes through here, so tests can replace the `vscode`
// module with a small stub and see exactly what the extension asked for.
import * as vscode from 'vscode';

export function createOutputChannel(name: string): vscode.LogOutputChannel {
    return vscode.window.createOutputChannel(name, { log: true });
}

export function getConfiguration(section: string, scope?: vscode.ConfigurationScope): vscode.WorkspaceConfiguration {
    return vscode.workspace.getConfiguration(section, scope);
}

export function onDidChangeConfiguration(listener: (e: vscode.ConfigurationChangeEvent) => void): vscode.Disposable {
    return vscode.workspace.onDidChangeConfiguration(listener);
}

export function getWorkspaceFolders(): readonly vscode.WorkspaceFolder[] {
    return vscode.workspace.workspaceFolders ?? [];
}

export function getWorkspaceFolder(uri: vscode.Uri): vscode.WorkspaceFolder | undefined {
    return vscode.workspace.getWorkspaceFolder(uri);
}

export function registerCommand(command: string, callback: (...args: any[]) => any): vscode.Disposable {
    return vscode.commands.registerCommand(command, callback);
}

export function activeTextEditor(): vscode.TextEditor | undefined {
    return vscode.window.activeTextEditor;
}

export function onDidChangeActiveTextEditor(listener: (e: vscode.TextEditor | undefined) => void): vscode.Disposable {
    return vscode.window.onDidChangeActiveTextEditor(listener);
}

export function createStatusBarItem(): vscode.StatusBarItem {
    return vscode.window.createStatusBarItem('sage.status', vscode.StatusBarAlignment.Left, 50);
}

export function showInformationMessage(message: string): Thenable<string | undefined> {
    return vscode.window.showInformationMessage(message);
}

export function showErrorMessage(message: string): Thenable<string | undefined> {
    return vscode.window.showErrorMessage(message);
}

export function showQuickPick<T extends vscode.QuickPickItem>(
    items: T[],
    options: vscode.QuickPickOptions & { canPickMany: true },
): Thenable<T[] | undefined>;
export function showQuickPick<T extends vscode.QuickPickItem>(
    items: T[],
    options?: vscode.QuickPickOptions,
): Thenable<T | undefined>;
export function showQuickPick<T extends vscode.QuickPickItem>(items: T[], options?: vscode.QuickPickOptions): Thenable<any> {
    return vscode.window.showQuickPick(items, options);
}

export function showInputBox(options: vscode.InputBoxOptions): Thenable<string | undefined> {
    return vscode.window.showInputBox(options);
}

export function withProgress<R>(title: string, task: () => Thenable<R>): Thenable<R> {
    return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title }, task);
}

/** A webview in `column` (a group's number), or beside the active editor. */
export function createWebviewPanel(viewType: string, title: string, column?: number): vscode.WebviewPanel {
    return vscode.window.createWebviewPanel(viewType, title, column ?? vscode.ViewColumn.Beside, {
        enableScripts: true,
        retainContextWhenHidden: false,
    });
}

export function getExtension(id: string): vscode.Extension<any> | undefined {
    return vscode.extensions.getExtension(id);
}

export function registerMcpServerDefinitionProvider(
    id: string,
    provider: vscode.McpServerDefinitionProvider,
): vscode.Disposable {
    return vscode.lm.registerMcpServerDefinitionProvider(id, provider);
}

export function newMcpStdioServerDefinition(
    label: string,
    command: string,
    args: string[],
    env: Record<string, string>,
    version: string,
): vscode.McpStdioServerDefinition {
    return new vscode.McpStdioServerDefinition(label, command, args, env, version);
}

export function newEventEmitter<T>(): vscode.EventEmitter<T> {
    return new vscode.EventEmitter<T>();
}

export function uriToString(uri: vscode.Uri): string {
    return uri.toString();
}

export function showWarningMessage(message: string, ...actions: string[]): Thenable<string | undefined> {
    return vscode.window.showWarningMessage(message, { modal: true }, ...actions);
}
