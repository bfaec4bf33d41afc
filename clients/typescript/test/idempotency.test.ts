import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, FinalError, InProgressError, MismatchError } from "../src/index.js";
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

test("run executes fn once and replays its result", async () => {
  const req = { scope: "billing/charge", key: unique("order"), fingerprint: "amount=1200" };
  let runs = 0;
  const charge = async () => {
    runs++;
    return { charged: 1200, run: runs };
  };
  const first = await c.idempotency.run(req, charge);
  assert.deepEqual(first, { value: { charged: 1200, run: 1 }, replayed: false });
  const again = await c.idempotency.run(req, charge);
  assert.deepEqual(again, { value: { charged: 1200, run: 1 }, replayed: true });
  assert.equal(runs, 1);
  const rec = await c.idempotency.inspect(req.scope, req.key);
  assert.equal(rec.exists, true);
  assert.equal(rec.completed, true);
  assert.equal(rec.fingerprint, "amount=1200");
  // Other input under the same key: refused, fn not run.
  const mismatch = await c.idempotency.run({ ...req, fingerprint: "amount=999" }, charge).catch((e: unknown) => e);
  assert.ok(mismatch instanceof MismatchError, String(mismatch));
  assert.equal(mismatch.status, 422);
  assert.equal(runs, 1);
});

test("the claim's fence and signal reach fn; raw bytes round-trip", async () => {
  const req = { scope: "billing/export", key: unique("export") };
  const codec = { encode: (b: Uint8Array) => b, decode: (b: Uint8Array) => b };
  const first = await c.idempotency.run(
    req,
    async (claim) => {
      assert.ok(claim.fence > 0);
      assert.equal(claim.signal.aborted, false);
      return new Uint8Array([0, 1, 254, 255]);
    },
    codec,
  );
  assert.deepEqual([...first.value], [0, 1, 254, 255]);
  const again = await c.idempotency.run(req, async () => assert.fail("ran twice"), codec);
  assert.equal(again.replayed, true);
  assert.deepEqual([...again.value], [0, 1, 254, 255]);
});

test("a duplicate while the first runs is in progress, or waits for its result", async () => {
  const req = { scope: "billing/charge", key: unique("slow"), request: { method: "POST", uri: "/charges", contentType: "application/json", body: '{"amount":5}' } };
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  let runs = 0;
  const first = c.idempotency.run(
    req,
    async () => {
      runs++;
      started();
      await gate;
      return "done";
    },
    { claimTtl: "3s" },
  );
  await running;
  const dup = await c.idempotency.run(req, async () => assert.fail("ran twice")).catch((e: unknown) => e);
  assert.ok(dup instanceof InProgressError, String(dup));
  assert.equal(dup.status, 409);
  assert.ok(dup.retryAfterMs > 0 && dup.retryAfterMs <= 3000, `retry after ${dup.retryAfterMs}`);
  const waiter = c.idempotency.run(req, async () => assert.fail("ran twice"), { wait: true });
  release();
  assert.deepEqual(await first, { value: "done", replayed: false });
  assert.deepEqual(await waiter, { value: "done", replayed: true });
  assert.equal(runs, 1);
});

test("an error releases the claim for a retry; a FinalError is recorded and replayed", async () => {
  const req = { scope: "billing/charge", key: unique("flaky") };
  let runs = 0;
  await assert.rejects(
    c.idempotency.run(req, async () => {
      runs++;
      throw new Error("card network timeout");
    }),
    /card network timeout/,
  );
  assert.equal((await c.idempotency.inspect(req.scope, req.key)).completed, false);
  const declined = async () => {
    runs++;
    throw new FinalError("card declined");
  };
  const e1 = await c.idempotency.run(req, declined).catch((e: unknown) => e);
  assert.ok(e1 instanceof FinalError && !e1.replayed, String(e1));
  const e2 = await c.idempotency.run(req, declined).catch((e: unknown) => e);
  assert.ok(e2 instanceof FinalError, String(e2));
  assert.equal(e2.replayed, true);
  assert.equal(e2.message, "card declined");
  assert.equal(runs, 2);
});

test("the claim is kept alive while fn runs past its TTL", async () => {
  const req = { scope: "billing/report", key: unique("long") };
  const res = await c.idempotency.run(
    req,
    async (claim) => {
      await new Promise((r) => setTimeout(r, 5000)); // two and a half claim TTLs
      assert.equal(claim.signal.aborted, false);
      const rec = await c.idempotency.inspect(req.scope, req.key);
      assert.equal(rec.fence, claim.fence);
      assert.ok(parseFloat(rec.claim_ttl ?? "0") > 0, `claim ttl ${rec.claim_ttl}`);
      return "report";
    },
    { claimTtl: "2s" },
  );
  assert.deepEqual(res, { value: "report", replayed: false });
});
