// Two turns of one thread through the real @ag-ui/client HttpAgent against `reasonwire gateway`.
// Usage: node http_agent_turns.mjs '{"url": ..., "key": ..., "threadId": ..., "runs": [r1, r2]}'
// Prints {"turn1": messages after turn 1, "turn2": messages after turn 2} as JSON; any verifier or
// transport error rejects runAgent and exits non-zero.
import { HttpAgent } from "@ag-ui/client";

const cfg = JSON.parse(process.argv[2]);
const agent = new HttpAgent({ url: cfg.url, headers: { Authorization: `Bearer ${cfg.key}` }, threadId: cfg.threadId });
agent.addMessage({ id: "user-1", role: "user", content: "What is the weather in Paris and in London?" });
await agent.runAgent({ runId: cfg.runs[0] });
const turn1 = structuredClone(agent.messages);
for (const message of turn1) {
  for (const call of message.role === "assistant" ? message.toolCalls ?? [] : []) {
    agent.addMessage({ id: `result-${call.id}`, role: "tool", toolCallId: call.id, content: '{"temperature_c": 18}' });
  }
}
await agent.runAgent({ runId: cfg.runs[1] });
process.stdout.write(JSON.stringify({ turn1, turn2: agent.messages }) + "\n");
