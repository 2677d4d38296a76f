// A conversation held by the real @ag-ui/client 1.0, the way a client holds it: the client's own
// messages are added with addMessage, each run's AG-UI events (reasonwire's translated stream) are
// applied by AbstractAgent.runAgent (verifier + defaultApplyEvents). A run that ends in RUN_ERROR
// rejects runAgent; the client keeps what it applied, exactly as a UI that says "try again" does.
// Usage: node apply_runs.mjs < steps.json, steps = {"threadId": ..., "steps": [{"add": message} |
// {"runId": ..., "events": [...]}]}. Prints {"messages": [...], "errors": [runId or null per run]}.
import { AbstractAgent } from "@ag-ui/client";
import { from } from "rxjs";

class RecordedAgent extends AbstractAgent {
  constructor(threadId) {
    super({ threadId });
    this.events = [];
  }
  run() {
    return from(this.events);
  }
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const cfg = JSON.parse(Buffer.concat(chunks).toString("utf-8"));
const agent = new RecordedAgent(cfg.threadId);
const errors = [];
for (const step of cfg.steps) {
  if (step.add) {
    agent.addMessage(step.add);
    continue;
  }
  agent.events = step.events;
  try {
    await agent.runAgent({ runId: step.runId });
    errors.push(null);
  } catch (error) {
    errors.push(String(error?.message ?? error).slice(0, 200));
  }
}
process.stdout.write(JSON.stringify({ messages: agent.messages, errors }) + "\n");
