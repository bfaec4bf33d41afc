import { startServe, type Serve } from "../tools/serve.js";

export { startServe, type Serve };

/** Polls cond every 20 ms until it holds, failing after timeoutMs. */
export async function waitFor(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Resolves with the time (performance.now) at which signal aborts. */
export function abortedAt(signal: AbortSignal): Promise<number> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(performance.now());
    signal.addEventListener("abort", () => resolve(performance.now()), { once: true });
  });
}

/** A unique name per call, so tests never share keys. */
let n = 0;
export function unique(prefix: string): string {
  return `${prefix}/${process.pid}-${Date.now()}-${++n}`;
}
