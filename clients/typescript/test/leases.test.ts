import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { inspect } from "node:util";
import {
  Client,
  HeldError,
  LeaseLostError,
  LeaseReleasedError,
  NotHeldError,
  StaleError,
  TransportError,
  UnauthorizedError,
  UnavailableError,
} from "../src/index.js";
import { abortedAt, renewCutClient, startServe, unique, waitFor, type Serve } from "./helpers.js";

let s: Serve;
let c: Client;
before(async () => {
  s = await startServe();
  c = new Client(s.url, { token: s.token });
});
after(async () => {
  await s?.stop();
});

test("a lease is exclusive and each grant's fence is greater", async () => {
  const key = unique("leases/exclusive");
  const a = await c.leases.acquire(key, "5s", { holder: "test a" });
  assert.ok(a.fence > 0);
  assert.ok(a.valid);
  const refused = await c.leases.acquire(key, "5s").then(
    () => assert.fail("a second holder was granted the key"),
    (e: unknown) => e,
  );
  assert.ok(refused instanceof HeldError, String(refused));
  assert.equal(refused.type, "urn:tenure:problem:held");
  assert.equal(refused.status, 409);
  assert.ok(refused.ttlMs > 0 && refused.ttlMs <= 5000, `ttl ${refused.ttlMs}`);
  assert.equal(refused.holder, "test a");

  const info = await c.leases.inspect(key);
  assert.equal(info.held, true);
  assert.equal(info.fence, a.fence);
  assert.equal(info.holder, "test a");

  await a.release();
  assert.ok(a.signal.aborted);
  assert.ok(a.signal.reason instanceof LeaseReleasedError);
  assert.equal((await c.leases.inspect(key)).held, false);

  const b = await c.leases.acquire(key, "5s");
  assert.ok(b.fence > a.fence, `fence ${b.fence} after ${a.fence}`);
  // A waiter (server-side wait) gets the key once b releases it, with a greater fence still.
  const waiting = c.leases.acquire(key, "5s", { wait: "10s" });
  await delay(100);
  await b.release();
  const w = await waiting;
  assert.ok(w.fence > b.fence);
  assert.deepEqual((await c.leases.list({ prefix: key })).leases.map((l) => [l.key, l.held, l.fence]), [[key, true, w.fence]]);
  await w.release();
});

test("withLease runs fn under the lease and releases it", async () => {
  const key = unique("leases/with");
  const got = await c.leases.withLease(key, "3s", async (lease) => {
    assert.equal((await c.leases.inspect(key)).fence, lease.fence);
    return lease.fence * 2;
  });
  const info = await c.leases.inspect(key);
  assert.equal(info.held, false);
  assert.equal(got, info.fence * 2);
});

test("keep-alive keeps the lease past its TTL", async () => {
  const key = unique("leases/keepalive");
  // TTLs of seconds, so that a loaded machine's late timers do not end it.
  const l = await c.leases.acquire(key, "2s");
  await delay(5000); // two and a half TTLs
  assert.equal(l.error, null);
  assert.ok(l.remainingMs > 0);
  const info = await c.leases.inspect(key);
  assert.equal(info.held, true);
  assert.equal(info.fence, l.fence);
  await assert.rejects(c.leases.acquire(key, "1s"), HeldError);
  await l.release();
  assert.equal((await c.leases.inspect(key)).held, false);
});

test("the signal aborts before the server's expiry when renewals get no answer", async () => {
  const cutting = renewCutClient(s);
  const key = unique("leases/cut");
  const ttl = 5000;
  const t0 = performance.now();
  const l = await cutting.client.leases.acquire(key, ttl);
  cutting.cut();
  const at = await abortedAt(l.signal);
  // Measured from before the acquire was sent: the server's expiry is later still.
  assert.ok(at - t0 < ttl, `aborted ${Math.round(at - t0)} ms after the acquire, TTL ${ttl} ms`);
  assert.ok(l.signal.reason instanceof LeaseLostError, String(l.signal.reason));
  assert.match(l.signal.reason.message, /ran out/);
  assert.equal(l.valid, false);
  // The server expires it afterwards; a new holder gets a greater fence,
  // and the old holder's write is refused.
  await waitFor("the server's expiry", async () => !(await c.leases.inspect(key)).held);
  const next = await c.leases.acquire(key, "5s");
  assert.ok(next.fence > l.fence);
  await assert.rejects(c.holderWrite(l, unique("values/cut"), "late"), NotHeldError);
  await next.release();
});

test("a refused renewal ends the lease: released behind its back and taken by another", async () => {
  const key = unique("leases/stolen");
  const l = await c.leases.acquire(key, "3s");
  // Someone with the token releases it, and another holder takes the key.
  await c.call("POST", "/v1/leases/release", { body: { key, token: l.token } });
  const thief = await c.leases.acquire(key, "10s");
  assert.ok(thief.fence > l.fence);
  const t0 = performance.now();
  await abortedAt(l.signal);
  assert.ok(performance.now() - t0 < 3000, "the next renewal (a third of the TTL away) ended it");
  const reason = l.signal.reason;
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.ok(reason.cause instanceof NotHeldError, String(reason.cause));
  assert.equal(reason.fence, l.fence);
  await assert.rejects(l.renew(), LeaseLostError);
  await assert.rejects(c.holderWrite(l, unique("values/stolen"), "x"), NotHeldError);
  await thief.release();
});

test("the signal aborts before the lease can have expired once the server stopped", async () => {
  const other = await startServe();
  try {
    const oc = new Client(other.url, { token: other.token, leases: { marginMs: 1000 } });
    const ttl = 5000;
    const t0 = performance.now();
    const l = await oc.leases.acquire(unique("leases/crash"), ttl);
    await other.kill();
    const at = await abortedAt(l.signal);
    assert.ok(at - t0 < ttl, `aborted ${Math.round(at - t0)} ms after the acquire, TTL ${ttl} ms`);
    assert.ok(l.signal.reason instanceof LeaseLostError);
    // Renewing (or anything else) now gets no answer.
    await assert.rejects(oc.leases.inspect("x"), TransportError);
  } finally {
    await other.stop();
  }
});

test("the holder-checked write lands only while the lease holds its key", async () => {
  const key = unique("leases/holder");
  const name = unique("values/holder");
  const l = await c.leases.acquire(key, "3s", { keepAlive: false });
  await c.holderWrite(l, name, "1");
  const v = await c.fencedRead(name);
  assert.equal(v.text, "1");
  assert.equal(v.fence, l.fence);
  assert.deepEqual([...v.value], [...Buffer.from("1")]);
  // Not renewed: the client's validity ends first, then the server's.
  await abortedAt(l.signal);
  assert.ok(l.signal.reason instanceof LeaseLostError);
  await waitFor("the server's expiry", async () => !(await c.leases.inspect(key)).held);
  // Refused although no other holder has written.
  const refused = await c.holderWrite(l, name, "2").catch((e: unknown) => e);
  assert.ok(refused instanceof NotHeldError, String(refused));
  assert.equal(refused.status, 409);
  assert.equal(refused.type, "urn:tenure:problem:not_held");
  assert.equal((await c.fencedRead(name)).text, "1");
  // After a release too.
  const m = await c.leases.acquire(key, "5s");
  await c.holderWrite(m, name, "2");
  await m.release();
  await assert.rejects(c.holderWrite(m, name, "3"), NotHeldError);
  assert.deepEqual(await c.fencedRead(name).then((x) => [x.text, x.fence]), ["2", m.fence]);
});

test("the fenced write admits only greater fences", async () => {
  const name = unique("values/fenced");
  assert.deepEqual(await c.fencedRead(name).then((x) => [x.text, x.fence, x.value.length]), ["", 0, 0]);
  await c.fencedWrite(name, 10, "ten");
  const stale = await c.fencedWrite(name, 9, "nine").catch((e: unknown) => e);
  assert.ok(stale instanceof StaleError, String(stale));
  assert.equal(stale.fence, 9);
  assert.equal(stale.current, 10);
  await c.fencedWrite(name, 11, new Uint8Array([0xff, 0x00]));
  const v = await c.fencedRead(name);
  assert.equal(v.fence, 11);
  assert.deepEqual([...v.value], [0xff, 0x00]);
  assert.equal(v.text, "");
});

test("errors carry the problem and never the token", async () => {
  const secret = "not-the-token-0123456789";
  const bad = new Client(s.url, { token: secret });
  const e = await bad.leases.inspect("x").catch((err: unknown) => err);
  assert.ok(e instanceof UnauthorizedError, String(e));
  assert.equal(e.status, 401);
  assert.equal(e.type, "urn:tenure:problem:unauthorized");
  for (const text of [String(e), e.stack ?? "", JSON.stringify(e.problem), inspect(e, { depth: 5 }), inspect(bad, { depth: 5 }), JSON.stringify(bad)]) {
    assert.ok(!text.includes(secret), `token in ${text}`);
  }
  const l = await c.leases.acquire(unique("leases/redact"), "2s");
  for (const text of [String(l), inspect(l, { depth: 5 }), JSON.stringify(l)]) {
    assert.ok(!text.includes(l.token), `lease token in ${text}`);
  }
  await l.release();
  // Nothing listens: a TransportError, which is an UnavailableError.
  const gone = new Client("http://127.0.0.1:1", { token: secret });
  const t = await gone.leases.inspect("x").catch((err: unknown) => err);
  assert.ok(t instanceof TransportError && t instanceof UnavailableError, String(t));
  assert.equal(t.status, 0);
  assert.ok(!inspect(t, { depth: 5 }).includes(secret));
});
