import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, ConflictError, NotFoundError } from "../src/index.js";
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

test("a session lives until revoked, and the checked write stops with it", async () => {
  const user = unique("alice");
  const created = await c.sessions.create({ userId: user, values: { cart: "3" }, idle: "30m", absolute: "8h" });
  assert.ok(created.token, "the server made a token");
  const token = created.token!;
  assert.equal(created.userId, user);
  assert.equal(created.version, 1);
  assert.deepEqual(JSON.parse(Buffer.from(created.data).toString()), { cart: "3" });
  assert.ok(created.absoluteUntil.getTime() > created.idleUntil.getTime());

  const loaded = await c.sessions.load({ token }, { idle: "30m" });
  assert.equal(loaded.id, created.id);
  assert.equal(loaded.token, undefined);
  const touched = await c.sessions.touch({ id: created.id }, 1, "1h");
  assert.ok(touched.getTime() > created.idleUntil.getTime());

  const saved = await c.sessions.save({ token }, 1, '{"cart":"4"}', "30m");
  assert.equal(saved.version, 2);
  assert.equal(Buffer.from(saved.data).toString(), '{"cart":"4"}');
  await assert.rejects(c.sessions.save({ token }, 1, "{}", "30m"), ConflictError);
  assert.deepEqual((await c.sessions.list(user)).map((r) => [r.id, r.version]), [[created.id, 2]]);

  await c.sessions.write({ token }, "role", "owner", { version: 2 });
  assert.equal(Buffer.from((await c.sessions.read(user, "role"))!).toString(), "owner");
  await assert.rejects(c.sessions.write({ token }, "role", "admin", { version: 1 }), ConflictError);
  assert.equal(await c.sessions.read(user, "never"), null);

  await c.sessions.revoke({ token });
  const gone = await c.sessions.load({ token }).catch((e: unknown) => e);
  assert.ok(gone instanceof NotFoundError, String(gone));
  assert.equal(gone.status, 404);
  assert.equal(gone.type, "urn:tenure:problem:not_found");
  await assert.rejects(c.sessions.write({ token }, "role", "admin"), NotFoundError);
  assert.equal(Buffer.from((await c.sessions.read(user, "role"))!).toString(), "owner");
});

test("revokeUser ends every session of the user", async () => {
  const user = unique("bob");
  const a = await c.sessions.create({ userId: user, idle: "30m", absolute: "8h" });
  const b = await c.sessions.create({ userId: user, idle: "30m", absolute: "8h" });
  assert.equal((await c.sessions.list(user)).length, 2);
  assert.equal(await c.sessions.revokeUser(user), 2);
  assert.deepEqual(await c.sessions.list(user), []);
  for (const r of [a, b]) await assert.rejects(c.sessions.load({ token: r.token! }), NotFoundError);
  assert.equal(await c.sessions.revokeUser(user), 0);
});
