import type { Disposable, Event, McpStdioServerDefinition } from 'vscode';
import type { ServerInfo } from './constants';
import type { SageSettings } from './settings';
import { serverEnvironment } from './settings';
import { newEventEmitter, newMcpStdioServerDefinition, registerMcpServerDefinitionProvider } from './vscodeapi';

export const MCP_PROVIDER_ID = 'sage.mcp';

export interface McpLaunch {
    interpreter: () => Promise<string>;
    settings: () => SageSettings;
}

/** The MCP server agent mode starts: `python -m sage_mcp.mcp` on the same database as the editor. */
export async function sageMcpDefinition(info: ServerInfo, launch: McpLaunch): Promise<McpStdioServerDefinition> {
    const python = await launch.interpreter();
    return newMcpStdioServerDefinition(
        'SAGE kernel memory',
        python,
        ['-m', info.mcpModule],
        serverEnvironment(launch.settings()),
        info.version,
    );
}

/**
 * Registers SAGE's MCP server with VS Code's agent mode. `changed()` tells
 * VS Code to ask again after the interpreter or database setting moves.
 */
export function registerMcpServer(info: ServerInfo, launch: McpLaunch): { disposable: Disposable; changed: () => void } {
    const emitter = newEventEmitter<void>();
    const disposable = registerMcpServerDefinitionProvider(MCP_PROVIDER_ID, {
        onDidChangeMcpServerDefinitions: emitter.event as Event<void>,
        provideMcpServerDefinitions: async () => [await sageMcpDefinition(info, launch)],
    });
    return {
        disposable: {
            dispose: () => {
                disposable.dispose();
                emitter.dispose();
            },
        },
        changed: () => emitter.fire(),
    };
}
