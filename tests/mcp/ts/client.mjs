// The official MCP TypeScript SDK as a client of SAGE, for
// tests/mcp/test_mcp_ts_client.py. One argument: a JSON object with
//   transport: "stdio" (command, args, cwd, env) or "http" (url, token)
//   scenario:  "stream" (an episode whose evaluation runs as a task) or
//              "cancel" (a task cancelled while its evaluation runs)
//   candidate, task: what compile_and_bench gets
// Prints one JSON line: what the client saw.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateTaskResultSchema, TaskStatusNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const spec = JSON.parse(process.argv[2]);

function transport() {
  if (spec.transport === "stdio") {
    return new StdioClientTransport({ command: spec.command, args: spec.args, cwd: spec.cwd, env: spec.env, stderr: "inherit" });
  }
  return new StreamableHTTPClientTransport(new URL(spec.url), {
    requestInit: { headers: { Authorization: `Bearer ${spec.token}` } },
  });
}

const structured = (r) => r.structuredContent;

async function stream(client, seen) {
  const retrieval = structured(await client.callTool({ name: "retrieve_rules", arguments: { task: spec.task } }));
  seen.episode_id = retrieval.episode_id;
  const progress = [];
  const started = performance.now();
  const messages = client.experimental.tasks.callToolStream(
    { name: "compile_and_bench", arguments: { candidate: spec.candidate, task: spec.task, episode_id: retrieval.episode_id, trials: 1 } },
    undefined,
    { onprogress: (p) => progress.push(p.message ?? ""), timeout: 600000 },
  );
  for await (const m of messages) {
    if (m.type === "taskCreated") {
      seen.handle_ms = performance.now() - started;
      seen.created = m.task;
    }
    seen.messages.push(m.type === "taskStatus" ? `taskStatus:${m.task.status}` : m.type);
    if (m.type === "result") seen.result = structured(m.result);
    if (m.type === "error") seen.error = String(m.error);
  }
  seen.progress = progress;
  seen.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => [t.taskId, t.status]);
  const report = await client.callTool({
    name: "record_adoption",
    arguments: { episode_id: retrieval.episode_id, attempt_id: seen.result?.attempt_id },
  });
  seen.report = structured(report);
}

async function cancel(client, seen) {
  const created = await client.request(
    { method: "tools/call", params: { name: "compile_and_bench", arguments: { candidate: spec.candidate, task: spec.task, trials: 1 }, task: {} } },
    CreateTaskResultSchema,
  );
  seen.created = created.task;
  const id = created.task.taskId;
  // Poll until the candidate runs (its status message names the phase), then cancel.
  for (;;) {
    const t = await client.experimental.tasks.getTask(id);
    if ((t.statusMessage ?? "").startsWith("checking case")) break;
    if (t.status !== "working") throw new Error(`task ended before it could be cancelled: ${JSON.stringify(t)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const before = performance.now();
  const cancelled = await client.experimental.tasks.cancelTask(id);
  seen.cancel_ms = performance.now() - before;
  seen.cancelled = cancelled.status;
  seen.after = (await client.experimental.tasks.getTask(id)).status;
  try {
    await client.experimental.tasks.cancelTask(id);
    seen.second_cancel = "accepted";
  } catch (e) {
    seen.second_cancel = String(e);
  }
  // The server evaluates the next candidate on the same workers.
  const next = await client.callTool({ name: "compile_and_bench", arguments: { candidate: spec.good, task: spec.task, trials: 1 } });
  seen.next = structured(next).status;
}

const client = new Client({ name: "sage-ts-test", version: "0" });
const seen = { messages: [], notified: [] };
client.setNotificationHandler(TaskStatusNotificationSchema, (n) => {
  seen.notified.push(n.params.status);
});
await client.connect(transport());
seen.protocol = client.transport?.protocolVersion ?? null;
seen.capabilities = client.getServerCapabilities();
const tools = (await client.listTools()).tools;
seen.task_tools = tools.filter((t) => t.execution?.taskSupport === "optional").map((t) => t.name).sort();
await (spec.scenario === "cancel" ? cancel : stream)(client, seen);
await client.close();
console.log(JSON.stringify(seen));
