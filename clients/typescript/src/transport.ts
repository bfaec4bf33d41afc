import { problemError, RateLimitedError, TransportError, type Problem, type TenureError } from "./errors.js";

/** Options of a {@link Client}. */
export interface ClientOptions {
  /**
   * The bearer token the server's configuration gives this client (for
   * the default configuration, the contents of `serve-token` in the
   * server's data directory). Sent on every request, never printed.
   */
  token?: string;
  /** The fetch function to send requests with. Default: the global fetch (Node 20 and later). */
  fetch?: typeof fetch;
  /** Headers sent with every request besides the API's own. */
  headers?: Record<string, string>;
}

/** How one call is sent. */
export interface CallOptions {
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  /** Aborts the request (it then fails with a TransportError). */
  signal?: AbortSignal | undefined;
}

/** The HTTP side of a client: sends a call, turns problems into errors. */
export class Transport {
  readonly base: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;
  readonly #headers: Record<string, string>;

  constructor(baseURL: string, options: ClientOptions = {}) {
    let u: URL;
    try {
      u = new URL(baseURL);
    } catch {
      throw new TypeError(`tenure: base URL ${JSON.stringify(baseURL)} is not an http or https URL`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new TypeError(`tenure: base URL ${JSON.stringify(baseURL)} is not an http or https URL`);
    }
    if (u.username !== "" || u.password !== "") {
      throw new TypeError("tenure: the base URL carries credentials; give the token in options.token");
    }
    this.base = baseURL.replace(/\/+$/, "");
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#headers = { ...(options.headers ?? {}) };
  }

  /** Sends one call and returns the decoded answer (undefined for 204). */
  async call<T>(method: "GET" | "POST", path: string, o: CallOptions = {}): Promise<T> {
    let url = this.base + path;
    if (o.query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(o.query)) if (v !== undefined) q.set(k, String(v));
      const s = q.toString();
      if (s) url += "?" + s;
    }
    const headers: Record<string, string> = { ...this.#headers, Accept: "application/json, application/problem+json" };
    if (this.#token) headers["Authorization"] = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (o.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(o.body);
    }
    let resp: Response;
    let text: string;
    try {
      resp = await this.#fetch(url, { method, headers, body, signal: o.signal ?? null });
      text = await resp.text();
    } catch (err) {
      throw new TransportError(`${method} ${path}: ${describe(err)}`, 0, err);
    }
    if (resp.status >= 200 && resp.status < 300) {
      if (resp.status === 204 || text === "") return undefined as T;
      try {
        return JSON.parse(text) as T;
      } catch (err) {
        throw new TransportError(`malformed answer to ${method} ${path}`, resp.status, err);
      }
    }
    throw this.#problem(resp, text);
  }

  #problem(resp: Response, text: string): TenureError {
    let p: Problem | undefined;
    if ((resp.headers.get("content-type") ?? "").startsWith("application/problem+json")) {
      try {
        const v = JSON.parse(text) as Problem;
        if (v && typeof v.type === "string" && v.type !== "") p = v;
      } catch {
        // not a problem body
      }
    }
    if (!p) return new TransportError(`answer ${resp.status} without a problem body`, resp.status);
    const err = problemError(p);
    if (err instanceof RateLimitedError) {
      const ra = Number(resp.headers.get("retry-after"));
      if (Number.isFinite(ra) && ra > 0) err.retryAfterMs = ra * 1000;
    }
    return err;
  }

  /** Keeps the token out of console.log and JSON. */
  toJSON(): object {
    return { base: this.base };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return `Transport { base: ${JSON.stringify(this.base)} }`;
  }
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return err.message + cause;
  }
  return String(err);
}

/** A random token of 160 bits (visible ASCII), for leases and claims. */
export function newToken(): string {
  const b = new Uint8Array(20);
  globalThis.crypto.getRandomValues(b);
  return Buffer.from(b).toString("base64url");
}

/** Jittered exponential backoff of the attempt-th retry (1-based), in ms. */
export function backoff(attempt: number, min = 5, max = 500): number {
  const d = Math.min(max, min * 2 ** Math.min(attempt - 1, 20));
  return d / 2 + Math.random() * (d / 2);
}

/** Waits ms, or until signal aborts; resolves false when it aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Encodes bytes or text as base64 (text as UTF-8). */
export function toBase64(v: string | Uint8Array): string {
  return (typeof v === "string" ? Buffer.from(v, "utf8") : Buffer.from(v.buffer, v.byteOffset, v.byteLength)).toString("base64");
}

/** Decodes base64 into bytes. */
export function fromBase64(s: string | undefined | null): Uint8Array {
  return new Uint8Array(Buffer.from(s ?? "", "base64"));
}

/** A signal that aborts after ms (at least 1 ms, rounded up). */
export function timeout(ms: number): AbortSignal {
  return AbortSignal.timeout(Math.max(1, Math.ceil(ms)));
}
