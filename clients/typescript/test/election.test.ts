import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { inspect } from "node:util";
import {
  Client,
  DEFAULT_OBSERVE_EVERY_MS,
  ELECTION_KEY_PREFIX,
  HeldError,
  LeaseLostError,
  LeaseReleasedError,
  NotHeldError,
  type Leader,
  type Term,
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

/**
 * How many waiters the server's queue has for key ahead of a newcomer
 * (-1: the key was free and nobody waited). The probe leaves the queue
 * at once.
 */
async function waitersAhead(key: string): Promise<number> {
  const token = `probe-${unique("t").replaceAll("/", "-")}`;
  try {
    const l = await c.leases.acquire(key, "1s", { token, stay: "1ms", keepAlive: false });
    await l.release();
    return -1;
  } catch (err) {
    if (!(err instanceof HeldError)) throw err;
    return err.position;
  } finally {
    await c.leases.leave(key, token);
  }
}

/** Resolves as p does, failing after ms. */
async function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(t);
  }
}

/** Tracks whether a promise settled, without waiting for it. */
function track<T>(p: Promise<T>): { p: Promise<T>; settled: () => boolean } {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  return { p, settled: () => done };
}

/** Collects what observe yields, in the background, until the signal aborts. */
function collect(it: AsyncIterable<Leader>): { seen: Leader[]; finished: Promise<void> } {
  const seen: Leader[] = [];
  const finished = (async () => {
    for await (const l of it) seen.push(l);
  })();
  return { seen, finished };
}

test("one leader at a time: campaigners wait in arrival order, each term's fence greater", async () => {
  const name = unique("one-leader");
  const key = ELECTION_KEY_PREFIX + name;
  const a = await c.election(name, { ttl: "5s", holder: "node a" }).campaign();
  assert.equal(a.key, key);
  assert.equal(a.holder, "node a");
  assert.ok(a.fence > 0);
  assert.ok(a.valid);

  // b comes first, then c: both wait while a leads.
  const b = track(c.election(name, { ttl: "5s", holder: "node b" }).campaign());
  await waitFor("b in the queue", async () => (await waitersAhead(key)) === 1);
  const cc = track(c.election(name, { ttl: "5s", holder: "node c" }).campaign());
  await waitFor("c in the queue behind b", async () => (await waitersAhead(key)) === 2);
  assert.equal(b.settled(), false, "b was elected while a leads");
  assert.equal(cc.settled(), false, "c was elected while a leads");
  assert.deepEqual(await c.election(name).leader().then((l) => [l.holder, l.fence]), ["node a", a.fence]);

  // a resigns: b, the first waiter, leads; c still waits.
  await a.resign();
  const bt = await within(30_000, b.p, "b elected");
  assert.equal(bt.holder, "node b");
  assert.ok(bt.fence > a.fence, `fence ${bt.fence} after ${a.fence}`);
  assert.equal(a.valid, false);
  assert.ok(a.signal.reason instanceof LeaseReleasedError, String(a.signal.reason));
  await waitFor("c in the queue alone", async () => (await waitersAhead(key)) === 1);
  assert.equal(cc.settled(), false, "c was elected while b leads");
  assert.deepEqual(await c.election(name).leader().then((l) => [l.holder, l.fence]), ["node b", bt.fence]);

  await bt.resign();
  const ct = await within(30_000, cc.p, "c elected");
  assert.equal(ct.holder, "node c");
  assert.ok(ct.fence > bt.fence, `fence ${ct.fence} after ${bt.fence}`);
  assert.equal(bt.valid, false);
  await ct.resign();
  assert.equal((await c.election(name).leader()).elected, false);
});

test("a campaigner waits across long polls until the leader resigns", async () => {
  const name = unique("long-wait");
  const key = ELECTION_KEY_PREFIX + name;
  // The waiter's acquires are counted: long polls of 300 ms, sent one after another.
  let polls = 0;
  const counting = new Client(s.url, {
    token: s.token,
    fetch: async (input, init) => {
      if (String(input).endsWith("/v1/leases/acquire")) polls++;
      return fetch(input, init);
    },
  });
  const a = await c.election(name, { ttl: "2s", holder: "a" }).campaign();
  const waiting = track(counting.election(name, { ttl: "2s", wait: 300, holder: "b" }).campaign());
  await waitFor("b's eighth long poll", () => polls >= 8);
  // Still waiting, still first in the queue, and a leads on (its renewals keep it past its TTL).
  assert.equal(waiting.settled(), false, "b was elected while a leads");
  assert.equal(await waitersAhead(key), 1);
  assert.ok(a.valid, "a's term ended");
  assert.deepEqual(await c.election(name).leader().then((l) => [l.holder, l.fence]), ["a", a.fence]);
  await a.resign();
  const b = await within(30_000, waiting.p, "b elected");
  assert.ok(b.fence > a.fence);
  assert.equal(b.holder, "b");
  await b.resign();
});

test("leader reports the holder, fence and time left, and no leader after resign", async () => {
  const name = unique("leader");
  const e = c.election(name, { ttl: "3s", holder: "node a" });
  assert.deepEqual(await e.leader(), { holder: "", fence: 0, ttlMs: 0, elected: false });
  const term = await e.campaign();
  const l = await c.election(name).leader();
  assert.equal(l.elected, true);
  assert.equal(l.holder, "node a");
  assert.equal(l.fence, term.fence);
  assert.ok(l.ttlMs > 0 && l.ttlMs <= 3000, `ttl ${l.ttlMs}`);

  await term.resign();
  const reason = await term.done;
  assert.ok(reason instanceof LeaseReleasedError, String(reason));
  assert.ok(term.signal.aborted);
  assert.equal(term.remainingMs, 0);
  assert.deepEqual(await e.leader(), { holder: "", fence: 0, ttlMs: 0, elected: false });
  await term.resign(); // again: not an error

  // The default holder names this process.
  const d = c.election(name);
  assert.ok(d.holder.endsWith(`-${process.pid}`), d.holder);
  const dt = await d.campaign();
  assert.equal((await d.leader()).holder, d.holder);
  await dt.resign();
});

test("observe yields the successive leaders in fence order", async () => {
  const name = unique("observe");
  const stop = new AbortController();
  const obs = collect(c.election(name, { observeEvery: 25 }).observe(stop.signal));
  try {
    await waitFor("the first read", () => obs.seen.length >= 1);
    assert.deepEqual(obs.seen[0], { holder: "", fence: 0, ttlMs: 0, elected: false });

    const a = await c.election(name, { ttl: "3s", holder: "a" }).campaign();
    await waitFor("a observed", () => obs.seen.some((l) => l.fence === a.fence));
    const b = track(c.election(name, { ttl: "3s", holder: "b" }).campaign());
    await waitFor("b in the queue", async () => (await waitersAhead(ELECTION_KEY_PREFIX + name)) === 1);
    await a.resign();
    const bt = await within(30_000, b.p, "b elected");
    await waitFor("b observed", () => obs.seen.some((l) => l.fence === bt.fence));
    await bt.resign();
    await waitFor("no leader observed", () => obs.seen.length > 0 && !obs.seen.at(-1)!.elected);
  } finally {
    stop.abort();
    await obs.finished;
  }
  const elected = obs.seen.filter((l) => l.elected);
  assert.deepEqual(elected.map((l) => l.holder), ["a", "b"]);
  assert.ok(elected[1]!.fence > elected[0]!.fence);
  for (const l of elected) assert.ok(l.ttlMs > 0 && l.ttlMs <= 3000, `ttl ${l.ttlMs}`);
  // Only changes: never the same term twice in a row.
  for (let i = 1; i < obs.seen.length; i++) assert.notEqual(obs.seen[i]!.fence, obs.seen[i - 1]!.fence);
});

test("observe reads again when the leader's time runs out, before observeEvery", async () => {
  const name = unique("observe-ttl");
  const term = await c.election(name, { ttl: "1500ms", holder: "short" }).campaign();
  const stop = new AbortController();
  // One read a minute, but the term read has at most 1.5 s left.
  const obs = collect(c.election(name, { observeEvery: "1m" }).observe(stop.signal));
  try {
    await waitFor("the leader observed", () => obs.seen.length >= 1);
    assert.deepEqual([obs.seen[0]!.holder, obs.seen[0]!.fence], ["short", term.fence]);
    await term.resign();
    await waitFor("no leader observed", () => obs.seen.length >= 2, 10_000);
    assert.deepEqual(obs.seen[1], { holder: "", fence: 0, ttlMs: 0, elected: false });
  } finally {
    stop.abort();
    await obs.finished;
  }
  assert.equal(obs.seen.length, 2);
  assert.equal(DEFAULT_OBSERVE_EVERY_MS, 1000);
});

/**
 * A client whose inspect calls are answered by script, one step per call
 * (the last step again once it runs out), for the election name; every
 * other request goes to the server. reads() counts the answered calls.
 */
function scriptedInspect(name: string, script: object[]): { client: Client; reads: () => number } {
  let reads = 0;
  const client = new Client(s.url, {
    token: s.token,
    fetch: async (input, init) => {
      if (!String(input).includes("/v1/leases/inspect")) return fetch(input, init);
      const step = script[Math.min(reads++, script.length - 1)]!;
      return new Response(JSON.stringify({ key: ELECTION_KEY_PREFIX + name, ...step }), { status: 200, headers: { "content-type": "application/json" } });
    },
  });
  return { client, reads: () => reads };
}

test("observe never yields an older term after a newer one", async () => {
  // The server's answers to inspect are replaced by a script: fence 5,
  // then an older 3 (a store that lost its data), 5 again, 7, no leader.
  const script = [
    { held: true, fence: 5, ttl: "10s", holder: "five" },
    { held: true, fence: 3, ttl: "10s", holder: "three" },
    { held: true, fence: 5, ttl: "10s", holder: "five" },
    { held: true, fence: 7, ttl: "10s", holder: "seven" },
    { held: false, fence: 7, ttl: "0s" },
  ];
  const scripted = scriptedInspect("scripted", script);
  const stop = new AbortController();
  const seen: Leader[] = [];
  for await (const l of scripted.client.election("scripted", { observeEvery: 5 }).observe(stop.signal)) {
    seen.push(l);
    if (!l.elected) break;
  }
  assert.ok(scripted.reads() >= script.length, `${scripted.reads()} reads`);
  assert.deepEqual(
    seen.map((l) => [l.fence, l.holder]),
    [
      [5, "five"],
      [7, "seven"],
      [0, ""],
    ],
  );
});

test("observe reads again soon while a term has no time left, before observeEvery", async () => {
  // A store that reports the time left in whole seconds (etcd) says 0s
  // for the last second of a term: observe must not wait observeEvery
  // (a minute here) to see it end.
  const script = [
    { held: true, fence: 9, ttl: "1s", holder: "nine" },
    { held: true, fence: 9, ttl: "0s", holder: "nine" },
    { held: true, fence: 9, ttl: "0s", holder: "nine" },
    { held: true, fence: 9, ttl: "0s", holder: "nine" },
    { held: false, fence: 9, ttl: "0s" },
  ];
  const scripted = scriptedInspect("zero", script);
  const stop = new AbortController();
  const obs = collect(scripted.client.election("zero", { observeEvery: "1m" }).observe(stop.signal));
  try {
    await waitFor("the end of the term observed", () => obs.seen.length >= 2, 10_000);
  } finally {
    stop.abort();
    await obs.finished;
  }
  assert.equal(scripted.reads(), script.length);
  assert.deepEqual(
    obs.seen.map((l) => [l.fence, l.elected]),
    [
      [9, true],
      [0, false],
    ],
  );
});

test("observe reports a failed read to onError and goes on", async () => {
  let fail = true;
  const flaky = new Client(s.url, {
    token: s.token,
    fetch: async (input, init) => {
      if (fail && String(input).includes("/v1/leases/inspect")) throw new TypeError("fetch failed (cut by the test)");
      return fetch(input, init);
    },
  });
  const errors: unknown[] = [];
  const stop = new AbortController();
  const it = flaky.election(unique("observe-err"), { observeEvery: 10 }).observe(stop.signal, {
    onError: (err) => {
      errors.push(err);
      if (errors.length === 3) fail = false;
    },
  });
  const first = await it.next();
  stop.abort();
  assert.equal(first.done, false);
  assert.deepEqual(first.value, { holder: "", fence: 0, ttlMs: 0, elected: false });
  assert.equal(errors.length, 3);
  assert.equal((await it.next()).done, true);
});

test("a term whose lease is released on the server ends at its next renewal", async () => {
  const name = unique("released");
  const term = await c.election(name, { ttl: "3s" }).campaign();
  await c.call("POST", "/v1/leases/release", { body: { key: term.key, token: term.lease.token } });
  const t0 = performance.now();
  const reason = await within(30_000, term.done, "the term's end");
  assert.ok(performance.now() - t0 < 3000, "the next renewal (a third of the TTL away) ended it");
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.ok(reason.cause instanceof NotHeldError, String(reason.cause));
  assert.equal(reason.fence, term.fence);
  assert.ok(term.signal.aborted);
  assert.equal(term.valid, false);
  assert.equal((await c.election(name).leader()).elected, false);
  await term.resign(); // ended already: not an error
});

test("a term whose lease is taken by another campaigner ends at its next renewal", async () => {
  const name = unique("taken");
  const a = await c.election(name, { ttl: "3s", holder: "a" }).campaign();
  const b = track(c.election(name, { ttl: "3s", holder: "b" }).campaign());
  await waitFor("b in the queue", async () => (await waitersAhead(ELECTION_KEY_PREFIX + name)) === 1);
  // a's lease ends behind its back: b, waiting, takes the election.
  const t0 = performance.now();
  await c.call("POST", "/v1/leases/release", { body: { key: a.key, token: a.lease.token } });
  const bt = await within(30_000, b.p, "b elected");
  assert.ok(bt.fence > a.fence);
  // a learns it at its next renewal, a third of its TTL away at most.
  await within(30_000, abortedAt(a.signal), "a's term ended");
  assert.ok(performance.now() - t0 < 3000, "a's term outlived its TTL");
  const reason = a.signal.reason;
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.ok(reason.cause instanceof NotHeldError, String(reason.cause));
  assert.ok(bt.valid, "the new leader's term ended");
  // The old leader's holder-checked write is refused; the new one's lands.
  const value = unique("values/taken");
  await assert.rejects(c.holderWrite(a.lease, value, "a"), NotHeldError);
  await c.holderWrite(bt.lease, value, "b");
  assert.deepEqual(await c.fencedRead(value).then((v) => [v.text, v.fence]), ["b", bt.fence]);
  assert.deepEqual(await c.election(name).leader().then((l) => [l.holder, l.fence]), ["b", bt.fence]);
  await bt.resign();
});

test("a term ends before the server could end it when its renewals get no answer", async () => {
  const cutting = renewCutClient(s);
  const name = unique("cut");
  const ttl = 5000;
  const t0 = performance.now();
  const term = await cutting.client.election(name, { ttl }).campaign();
  cutting.cut();
  const reason = await within(10_000, term.done, "the term's end");
  const at = performance.now();
  // Measured from before the campaign was sent: the server's expiry is later still.
  assert.ok(at - t0 < ttl, `ended ${Math.round(at - t0)} ms after the campaign, TTL ${ttl} ms`);
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.match(reason.message, /ran out/);
  // The server still has the term until its TTL: then the next campaigner leads.
  assert.equal((await c.election(name).leader()).fence, term.fence);
  const next = await c.election(name, { ttl: "3s" }).campaign(AbortSignal.timeout(15_000));
  assert.ok(next.fence > term.fence);
  assert.ok(performance.now() - t0 >= ttl - 100, "the next term began before the server's expiry");
  await next.resign();
});

test("a campaign whose signal aborts rejects and gives up its place", async () => {
  const name = unique("abort");
  const key = ELECTION_KEY_PREFIX + name;
  const a = await c.election(name, { ttl: "5s" }).campaign();
  const ac = new AbortController();
  // A place kept long after its last request: only leaving frees it in time.
  const b = c.election(name, { ttl: "5s", stay: "30s" }).campaign(ac.signal);
  await waitFor("b in the queue", async () => (await waitersAhead(key)) === 1);
  const why = new Error("stop campaigning");
  ac.abort(why);
  const err = await b.then(
    () => assert.fail("the campaign was elected"),
    (e: unknown) => e,
  );
  assert.equal(err, why);
  await waitFor("b's place given up", async () => (await waitersAhead(key)) === 0, 5000);
  // a resigns: nobody is elected in b's place.
  await a.resign();
  assert.equal((await c.election(name).leader()).elected, false);
  // An aborted signal fails at once.
  await assert.rejects(c.election(name).campaign(AbortSignal.abort(why)), (e) => e === why);
});

test("an election checks its options and never shows a token", async () => {
  assert.throws(() => c.election(""), RangeError);
  assert.throws(() => c.election("x", { ttl: 0 }), RangeError);
  assert.throws(() => c.election("x", { ttl: "25h" }), RangeError);
  assert.throws(() => c.election("x", { observeEvery: -1 }), RangeError);
  assert.throws(() => c.election("x", { wait: "nonsense" }), RangeError);

  const e = c.election(unique("redact"), { ttl: "2s", holder: "h" });
  const term: Term = await e.campaign();
  const token = term.lease.token;
  assert.ok(token.length > 0);
  for (const text of [String(term), inspect(term, { depth: 5 }), JSON.stringify(term), String(e), inspect(e, { depth: 5 }), JSON.stringify(e)]) {
    assert.ok(!text.includes(token), `token in ${text}`);
  }
  assert.deepEqual(JSON.parse(JSON.stringify(term)), { name: e.name, key: e.key, fence: term.fence, holder: "h", ttl_ms: 2000 });
  await term.resign();
  // A holder the server refuses: the error names the problem, not the token.
  const bad = await c
    .election(unique("bad-holder"), { holder: "x".repeat(200) })
    .campaign()
    .catch((err: unknown) => err);
  assert.ok(bad instanceof Error && /holder/.test(bad.message), String(bad));
});
