import type { WebviewPanel } from 'vscode';
import { createWebviewPanel } from './vscodeapi';
import { makeNonce } from './html';

/** One webview per view type, reused and re-rendered rather than stacked. */
export class Panels {
    private readonly open = new Map<string, WebviewPanel>();

    show(
        viewType: string,
        title: string,
        render: (nonce: string, cspSource: string) => string,
        onMessage?: (message: any) => unknown,
    ): WebviewPanel {
        let panel = this.open.get(viewType);
        if (!panel) {
            // SAGE's panels share one group (tabs), rather than each opening
            // beside whichever one has focus and pushing the code aside.
            const group = [...this.open.values()].find((p) => p.viewColumn !== undefined)?.viewColumn;
            panel = createWebviewPanel(viewType, title, group);
            this.open.set(viewType, panel);
            panel.onDidDispose(() => this.open.delete(viewType));
            if (onMessage) {
                panel.webview.onDidReceiveMessage(onMessage);
            }
        } else {
            panel.title = title;
            panel.reveal();
        }
        panel.webview.html = render(makeNonce(), panel.webview.cspSource);
        return panel;
    }

    get(viewType: string): WebviewPanel | undefined {
        return this.open.get(viewType);
    }

    dispose(): void {
        for (const panel of this.open.values()) {
            panel.dispose();
        }
        this.open.clear();
    }
}
