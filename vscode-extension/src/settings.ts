import type { ConfigurationScope } from 'vscode';
import { getConfiguration } from './vscodeapi';

export interface SageSettings {
    /** Interpreter with SAGE installed; empty means "discover one". */
    pythonPath: string;
    /** SQLite memory database (SAGE_DB); empty means SAGE's default. */
    databasePath: string;
    /** Evaluation backend (SAGE_BACKEND); empty means SAGE's default. */
    backend: string;
    /** Ascend chip for the compile gate (SAGE_CHIP); empty means SAGE's default. */
    chip: string;
    /** Evaluate a candidate on every save; the language server reads it. */
    benchmarkOnSave: boolean;
}

export function getSettings(scope?: ConfigurationScope, workspaceFolder?: string): SageSettings {
    const config = getConfiguration('sage', scope);
    const read = (key: string): string => expandVariables(String(config.get<string>(key) ?? '').trim(), workspaceFolder);
    return {
        pythonPath: read('pythonPath'),
        databasePath: read('databasePath'),
        backend: read('backend'),
        chip: read('chip'),
        benchmarkOnSave: config.get<boolean>('benchmarkOnSave') === true,
    };
}

/** `${workspaceFolder}`, `${userHome}` and `~/` the way users write them in settings.json. */
export function expandVariables(value: string, workspaceFolder?: string, home: string = process.env.HOME ?? ''): string {
    let out = value;
    if (workspaceFolder !== undefined) {
        out = out.split('${workspaceFolder}').join(workspaceFolder);
    }
    out = out.split('${userHome}').join(home);
    if (out.startsWith('~/') && home) {
        out = home + out.slice(1);
    }
    return out;
}

/**
 * The environment both servers (language and MCP) get, so an agent's
 * evaluations and the editor's lenses read the same memory.
 */
export function serverEnvironment(settings: SageSettings): Record<string, string> {
    const env: Record<string, string> = {};
    if (settings.databasePath) {
        env.SAGE_DB = settings.databasePath;
    }
    if (settings.backend) {
        env.SAGE_BACKEND = settings.backend;
    }
    if (settings.chip) {
        env.SAGE_CHIP = settings.chip;
    }
    return env;
}

/**
 * The `sage` section the language server reads (as initializationOptions at
 * start, and in workspace/didChangeConfiguration when it changes).
 */
export function languageServerSettings(settings: SageSettings): { benchmarkOnSave: boolean } {
    return { benchmarkOnSave: settings.benchmarkOnSave };
}

/** Settings whose change needs the servers restarted. */
export const RESTART_KEYS = ['sage.pythonPath', 'sage.databasePath', 'sage.backend', 'sage.chip'];

/** The restart settings whose effective value differs between `before` and `after`. */
export function changedRestartKeys(before: SageSettings, after: SageSettings): string[] {
    return RESTART_KEYS.filter((key) => {
        const name = key.slice('sage.'.length) as keyof SageSettings;
        return before[name] !== after[name];
    });
}

/** Settings sent to the running language server instead. */
export const LIVE_KEYS = ['sage.benchmarkOnSave'];
