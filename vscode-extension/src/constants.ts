import * as fs from 'node:fs';
import * as path from 'node:path';

/** Where the server id and Python modules are named: package.json's `serverInfo`, read once. */
export interface ServerInfo {
    id: string;
    name: string;
    module: string;
    mcpModule: string;
    version: string;
}

export const EXTENSION_ROOT = path.dirname(__dirname);

export function loadServerInfo(root: string = EXTENSION_ROOT): ServerInfo {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    return { ...pkg.serverInfo, version: pkg.version };
}

/** Commands the language server executes (workspace/executeCommand). */
export const ServerCommand = {
    benchmark: 'sage.benchmark',
    cancelBenchmark: 'sage.cancelBenchmark',
    retrieveRules: 'sage.retrieveRules',
    recordAdoption: 'sage.recordAdoption',
    consolidate: 'sage.consolidate',
    memory: 'sage.memory',
    quarantine: 'sage.quarantine',
    delete: 'sage.delete',
    setTask: 'sage.setTask',
    listTasks: 'sage.listTasks',
    lastResult: 'sage.lastResult',
    roofline: 'sage.roofline',
} as const;

/** Commands the extension itself registers (palette entries in package.json). */
export const ClientCommand = {
    benchmarkKernel: 'sage.benchmarkKernel',
    benchmarkFile: 'sage.benchmarkFile',
    cancelBenchmarkFile: 'sage.cancelBenchmarkFile',
    showRules: 'sage.showRules',
    adopt: 'sage.adopt',
    consolidateMemory: 'sage.consolidateMemory',
    showMemory: 'sage.showMemory',
    pickTask: 'sage.pickTask',
    restartServer: 'sage.restartServer',
    showProfile: 'sage.showProfile',
} as const;
