// The README's install and usage, as a user follows them: the package packed
// with npm pack, installed from the tarball into a new project, the README's
// code blocks compiled with tsc (strict) and run against a real tenure serve.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startServe, type Serve } from "./helpers.js";

const run = promisify(execFile);
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

let s: Serve;
let dir: string;
before(async () => {
  s = await startServe();
  dir = mkdtempSync(join(tmpdir(), "tenure-readme-"));
});
after(async () => {
  await s?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the README's install and usage work", async () => {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  await run(npm, ["pack", "--pack-destination", dir, "--loglevel=error"], { cwd: pkg });
  const tgz = readdirSync(dir).find((f) => f.endsWith(".tgz"));
  assert.ok(tgz, "npm pack wrote no tarball");
  const app = join(dir, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  // A tarball without dependencies: npm needs no registry to install it.
  await run(npm, ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", join(dir, tgz)], { cwd: app });

  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.ok(blocks.length >= 5, `${blocks.length} ts blocks in the README`);
  writeFileSync(join(app, "example.ts"), blocks.join("\n"));
  const tsc = join(pkg, "node_modules", "typescript", "bin", "tsc");
  await run(process.execPath, [tsc, "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
    "--types", "node", "--typeRoots", join(pkg, "node_modules", "@types"), "--outDir", "out", "example.ts"], { cwd: app }).catch((e: { stdout?: string }) => {
    assert.fail(`tsc: ${e.stdout ?? e}`);
  });
  const env = { ...process.env, TENURE_URL: s.url, TENURE_TOKEN: s.token };
  const { stdout } = await run(process.execPath, [join("out", "example.js")], { cwd: app, env });
  const lines = stdout.trim().split("\n");
  assert.deepEqual(lines, [
    "holding billing/close-month fence true",
    "ledger: closed after: nothing",
    "held by worker-1 for less than 10s",
    "lease ended: LeaseReleasedError",
    "fences increase: true",
    "late write refused: 409 urn:tenure:problem:not_held",
    "leading: worker-1 fence true",
    "leader: worker-1 true true",
    "next term: worker-2 true first ended: true",
    "observed: worker-2",
    "after resign: no leader",
    "{ charged: 1200, currency: 'eur' } false true charged 1 time(s)",
    "final: card declined",
    "request 1: allowed",
    "request 2: allowed",
    "request 3: denied, retry in 30s",
    "after logout: not found",
    "log out everywhere: 1 session(s) ended",
  ]);
});
