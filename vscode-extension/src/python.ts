import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Uri } from 'vscode';
import { getExtension } from './vscodeapi';

export interface InterpreterSources {
    configured: string;
    fromPythonExtension?: string;
    workspaceFolders: string[];
    platform: NodeJS.Platform;
    exists: (file: string) => boolean;
}

/**
 * The interpreter that runs SAGE, in the order a user expects: the
 * `sage.pythonPath` setting, the interpreter selected in the Python
 * extension, a `.venv` in the workspace, then `python3` on PATH.
 */
export function chooseInterpreter(sources: InterpreterSources): string {
    if (sources.configured) {
        return sources.configured;
    }
    if (sources.fromPythonExtension) {
        return sources.fromPythonExtension;
    }
    const venvPython =
        sources.platform === 'win32' ? path.join('.venv', 'Scripts', 'python.exe') : path.join('.venv', 'bin', 'python');
    for (const folder of sources.workspaceFolders) {
        const candidate = path.join(folder, venvPython);
        if (sources.exists(candidate)) {
            return candidate;
        }
    }
    return sources.platform === 'win32' ? 'python' : 'python3';
}

/** The interpreter the Python extension has selected for `resource`, if that extension is installed. */
export async function pythonExtensionInterpreter(resource?: Uri): Promise<string | undefined> {
    const extension = getExtension('ms-python.python');
    if (!extension) {
        return undefined;
    }
    try {
        const api = extension.isActive ? extension.exports : await extension.activate();
        const environments = api?.environments;
        if (!environments) {
            return undefined;
        }
        const envPath = environments.getActiveEnvironmentPath(resource);
        const resolved = await environments.resolveEnvironment(envPath);
        return resolved?.executable?.uri?.fsPath;
    } catch (err) {
        // A broken Python extension must not keep SAGE from starting; the
        // fallbacks below still find an interpreter.
        console.error(`SAGE: could not ask the Python extension for an interpreter: ${err}`);
        return undefined;
    }
}

export async function findInterpreter(configured: string, workspaceFolders: string[], resource?: Uri): Promise<string> {
    return chooseInterpreter({
        configured,
        fromPythonExtension: configured ? undefined : await pythonExtensionInterpreter(resource),
        workspaceFolders,
        platform: process.platform,
        exists: (file) => fs.existsSync(file),
    });
}
