import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, InvalidError, type components } from "../src/index.js";
import { startServe, unique, type Serve } from "./helpers.js";

let s: Serve;
let c: Client;
before(async () => {
  s = await startServe();
  c = new Client(s.url, { token: s.token });
});
after(async () => {
  await s?.stop();
});

test("allow admits up to the limit, then denies with when to come back", async () => {
  const key = unique("user");
  const limit = { name: "api", rate: 2, period: "1m" };
  const a = await c.limits.allow({ key, limit });
  assert.equal(a.allowed, true);
  assert.equal(a.decisions.length, 1);
  const d = a.decisions[0]!;
  assert.equal(d.remaining, 1);
  assert.equal(d.algorithm, "gcra"); // the server's default
  assert.deepEqual(d.limit, { name: "api", rate: 2, periodMs: 60_000, burst: 2 });
  assert.deepEqual(d.state, { name: "api", kind: "g", key });
  assert.ok(d.at instanceof Date && !Number.isNaN(d.at.getTime()));

  assert.equal((await c.limits.allow({ key, limit })).allowed, true);
  const denied = await c.limits.allow({ key, limit });
  assert.equal(denied.allowed, false);
  assert.equal(denied.decisions[0]!.allowed, false);
  assert.equal(denied.decisions[0]!.remaining, 0);
  assert.ok(denied.retryAfterMs > 0 && denied.retryAfterMs <= 30_000, `retry after ${denied.retryAfterMs}`);

  // Peek judges without consuming; reset makes the limit available again.
  await c.limits.reset({ key, limit });
  assert.equal((await c.limits.allow({ key, limit }, { peek: true })).decisions[0]!.remaining, 2);
  assert.equal((await c.limits.allow({ key, limit })).decisions[0]!.remaining, 1);
});

test("limits are judged together: all or nothing", async () => {
  const key = unique("user");
  const perMinute = { name: "minute", rate: 10, period: 60_000 };
  const costly = { name: "daily", rate: 3, period: "24h" };
  const both = await c.limits.allow([
    { key, limit: perMinute, algorithm: "fixed-window" },
    { key, limit: costly, n: 3, algorithm: "sliding-window" },
  ]);
  assert.equal(both.allowed, true);
  assert.deepEqual(both.decisions.map((d) => d.algorithm), ["fixed-window", "sliding-window"]);
  const next = await c.limits.allow([{ key, limit: perMinute, algorithm: "fixed-window" }, { key, limit: costly, algorithm: "sliding-window" }]);
  assert.equal(next.allowed, false);
  assert.deepEqual(next.decisions.map((d) => d.allowed), [true, false]);
  // The per-minute limit was not consumed by the denied group.
  const peek = await c.limits.allow({ key, limit: perMinute, algorithm: "fixed-window" }, { peek: true });
  assert.equal(peek.decisions[0]!.remaining, 9);
  await assert.rejects(c.limits.allow({ key, limit: { rate: 0, period: "1s" } }), InvalidError);
});

test("the generated wire types leave members with a server default optional", () => {
  // Compiles only while algorithm and n (server defaults) are optional.
  const r: components["schemas"]["RateRequest"] = { key: "k", limit: { rate: 1, period: "1s" } };
  const b: components["schemas"]["IdemBegin"] = { scope: "s", key: "k" };
  const a: components["schemas"]["AcquireLease"] = { key: "k", ttl: "1s" };
  assert.equal(r.algorithm ?? "gcra", "gcra");
  assert.equal(b.claim_ttl, undefined);
  assert.equal(a.wait, undefined);
});
