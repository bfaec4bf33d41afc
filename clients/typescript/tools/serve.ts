// Starts a real `tenure serve` for the tests and the document check: the
// binary of $TENURE_BIN, else one built with `go build` from the
// repository this package is in; the embedded SQLite default in a new
// temporary data directory; a free loopback port chosen by the kernel.
import { spawn, execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** A running tenure serve. */
export interface Serve {
  /** The base URL, http://127.0.0.1:PORT. */
  url: string;
  /** The admin token the server minted into its data directory. */
  token: string;
  dataDir: string;
  /** Stops the server (SIGTERM: it drains) and waits for it to exit. */
  stop(): Promise<void>;
  /** Kills the server at once (SIGKILL), as a crash would. */
  kill(): Promise<void>;
}

/** The repository root: the nearest directory above this file whose go.mod is tenure's. */
export function repoRoot(): string {
  let d = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const m = join(d, "go.mod");
    if (existsSync(m) && /^module github\.com\/tenurekit\/tenure\s*$/m.test(readFileSync(m, "utf8"))) return d;
    const up = dirname(d);
    if (up === d) throw new Error("tenure: no repository root (a go.mod of github.com/tenurekit/tenure) above " + fileURLToPath(import.meta.url));
    d = up;
  }
}

let built: Promise<string> | undefined;

/** The tenure binary: $TENURE_BIN, else built once per process into a temporary directory. */
export function tenureBinary(): Promise<string> {
  if (process.env["TENURE_BIN"]) return Promise.resolve(process.env["TENURE_BIN"]);
  built ??= new Promise((resolve, reject) => {
    const dir = mkdtempSync(join(tmpdir(), "tenure-bin-"));
    const out = join(dir, "tenure");
    const env = { ...process.env };
    if (existsSync("/usr/local/go/bin")) env["PATH"] = `/usr/local/go/bin:${env["PATH"] ?? ""}`;
    execFile("go", ["build", "-o", out, "./cmd/tenure"], { cwd: repoRoot(), env, maxBuffer: 16 << 20 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`go build ./cmd/tenure: ${err.message}\n${stderr}`));
      else {
        process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
        resolve(out);
      }
    });
  });
  return built;
}

/** Starts tenure serve and waits until /readyz answers 200, for at most readyTimeoutMs (default 60 s). */
export async function startServe(o: { readyTimeoutMs?: number; args?: string[] } = {}): Promise<Serve> {
  const bin = await tenureBinary();
  const dataDir = mkdtempSync(join(tmpdir(), "tenure-serve-"));
  const child = spawn(bin, ["serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--drain", "2s", ...(o.args ?? [])], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  let exited: number | string | null = null;
  const exit = new Promise<void>((resolve) =>
    child.once("exit", (code, signal) => {
      exited = code ?? signal;
      resolve();
    }),
  );
  child.stdout!.resume();
  const deadline = performance.now() + (o.readyTimeoutMs ?? 60_000);
  const fail = async (why: string): Promise<never> => {
    child.kill("SIGKILL");
    await exit;
    rmSync(dataDir, { recursive: true, force: true });
    throw new Error(`tenure serve: ${why}\n${stderr}`);
  };
  // Its log line "serving ... api=http://127.0.0.1:PORT/v1" names the port.
  const url = await new Promise<string | null>((resolve) => {
    const onData = (b: Buffer) => {
      stderr += b.toString();
      const m = /api=(http:\/\/[^\s]+)\/v1/.exec(stderr);
      if (m) resolve(m[1]!);
    };
    child.stderr!.on("data", onData);
    void exit.then(() => resolve(null));
    const t = setTimeout(() => resolve(null), Math.max(0, deadline - performance.now()));
    t.unref();
  });
  if (url === null) return fail(exited !== null ? `exited (${exited}) before listening` : "did not listen in time");
  const token = readFileSync(join(dataDir, "serve-token"), "utf8").trim();
  // Poll /readyz until the store answers, within the deadline.
  for (;;) {
    try {
      const r = await fetch(url + "/readyz", { signal: AbortSignal.timeout(2000) });
      await r.text();
      if (r.status === 200) break;
    } catch {
      // not yet
    }
    if (exited !== null) return fail(`exited (${exited}) before ready`);
    if (performance.now() > deadline) return fail("not ready in time");
    await new Promise((r) => setTimeout(r, 25));
  }
  const end = async (sig: NodeJS.Signals) => {
    if (exited === null) child.kill(sig);
    await exit;
    rmSync(dataDir, { recursive: true, force: true });
  };
  return { url, token, dataDir, stop: () => end("SIGTERM"), kill: () => end("SIGKILL") };
}

