import { Client } from "../src/index.js";
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

/**
 * A client of s whose lease renewals are cut on the way once cut() was
 * called (the server never sees them). Its margin leaves room for a late
 * timer on a loaded machine: a lease's signal is still due before the TTL
 * measured from before the acquire was sent.
 */
export function renewCutClient(s: Serve): { client: Client; cut: () => void } {
  let cut = false;
  const client = new Client(s.url, {
    token: s.token,
    leases: { marginMs: 1000 },
    fetch: async (input, init) => {
      if (cut && String(input).endsWith("/v1/leases/renew")) throw new TypeError("fetch failed (cut by the test)");
      return fetch(input, init);
    },
  });
  return { client, cut: () => (cut = true) };
}
