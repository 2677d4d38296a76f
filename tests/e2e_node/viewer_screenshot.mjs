// Open /v1/viewer in headless Chromium (Debian's, via playwright-core), wait for the run to end,
// take a screenshot and print what the page rendered as JSON.
// Usage: node viewer_screenshot.mjs '{"url": ..., "chromium": "/usr/bin/chromium", "screenshot": "out.png"[, "timeout": ms]}'
import { chromium } from "playwright-core";

const cfg = JSON.parse(process.argv[2]);
const browser = await chromium.launch({
  executablePath: cfg.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  await page.goto(cfg.url);
  await page.waitForSelector("#status.done", { timeout: cfg.timeout || 90_000 });
  await page.screenshot({ path: cfg.screenshot, fullPage: true });
  const rendered = await page.evaluate(() => ({
    status: document.getElementById("status").textContent,
    reasoning: [...document.querySelectorAll("details.reasoning .text")].map(e => e.textContent),
    reasoningOpen: [...document.querySelectorAll("details.reasoning")].map(e => e.open),
    tools: [...document.querySelectorAll(".tool")].map(e => e.textContent),
    answer: [...document.querySelectorAll(".answer")].map(e => e.textContent).join("\n"),
    visibleText: document.body.innerText,
  }));
  process.stdout.write(JSON.stringify(rendered) + "\n");
} finally {
  await browser.close();
}
