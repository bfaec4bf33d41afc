import { Election, type ElectionOptions } from "./election.js";
import { Idempotency } from "./idempotency.js";
import { Leases, type Lease, type MarginOptions } from "./lease.js";
import { Limits } from "./limits.js";
import type { components } from "./schema.js";
import { Sessions } from "./sessions.js";
import { fromBase64, toBase64, Transport, type ClientOptions } from "./transport.js";

type W = components["schemas"];

/** A lease held elsewhere, as acquireLease answered it: enough for a holder-checked write. */
export interface LeaseRef {
  key: string;
  token: string;
  fence: number;
}

/** A server-kept value and the fence that wrote it. */
export interface FencedValue {
  /** The value; empty when never written. */
  value: Uint8Array;
  /** The value as UTF-8 text (empty when it is not text). */
  text: string;
  /** The fence that wrote it (0: never written). */
  fence: number;
}

/** Options of a {@link Client}: the transport's, and the leases' safety margin. */
export interface Options extends ClientOptions {
  /** The safety margin of leases' validity. */
  leases?: MarginOptions;
}

/**
 * A client of tenure serve. Every method is one or a few HTTP requests to
 * the API under /v1; errors the server answers are {@link TenureError}s of
 * the problem's class, and a request that got no answer is a
 * {@link TransportError} (an {@link UnavailableError}: its outcome is
 * unknown). The bearer token is sent on every request and never printed.
 *
 * ```ts
 * const c = new Client("http://127.0.0.1:7070", { token });
 * await c.leases.withLease("billing/close-month", "30s", async (lease) => { ... });
 * ```
 */
export class Client {
  readonly #t: Transport;
  /** Leases with fencing tokens and keep-alive. */
  readonly leases: Leases;
  /** Idempotency records: run a function at most once per key. */
  readonly idempotency: Idempotency;
  /** Rate limits judged on the store's clock. */
  readonly limits: Limits;
  /** Server-side sessions. */
  readonly sessions: Sessions;

  /** A client of the server at baseURL (for example "http://127.0.0.1:7070"; the /v1 paths are added to it). */
  constructor(baseURL: string, options: Options = {}) {
    this.#t = new Transport(baseURL, options);
    this.leases = new Leases(this.#t, options.leases);
    this.idempotency = new Idempotency(this.#t);
    this.limits = new Limits(this.#t);
    this.sessions = new Sessions(this.#t);
  }

  /**
   * The leader election name on this server: one leader at a time, its
   * term fenced like any lease (the lease "election/" + name), the other
   * campaigners waiting in arrival order. It sends nothing until used.
   *
   * ```ts
   * const term = await c.election("settlement", { ttl: "15s" }).campaign();
   * ```
   */
  election(name: string, options: ElectionOptions = {}): Election {
    return new Election(this.leases, name, options);
  }

  /** The server's base URL. */
  get baseURL(): string {
    return this.#t.base;
  }

  /**
   * Sets the server-kept value name only while the lease still holds its
   * key: the server checks key, token and fence on the store's clock in the
   * same atomic step as the write, so a lease that ended is refused with a
   * {@link NotHeldError} even before the next holder wrote; a newer fence
   * already admitted is a {@link StaleError}. Either way nothing changed.
   * The write for read-modify-write: read with fencedRead, compute, write
   * with holderWrite.
   */
  async holderWrite(lease: Lease | LeaseRef, name: string, value: string | Uint8Array, signal?: AbortSignal): Promise<void> {
    const body: W["FencedHolderWrite"] = { name, key: lease.key, token: lease.token, fence: lease.fence, value_base64: toBase64(value) };
    await this.#t.call("POST", "/v1/fenced/holder-write", { body, signal });
  }

  /**
   * Sets the server-kept value name if fence is greater than every fence
   * admitted for name before ({@link StaleError} otherwise). It orders
   * writers and is blind to time: a holder whose lease ended is still
   * admitted until the next holder wrote. For read-modify-write use
   * holderWrite.
   */
  async fencedWrite(name: string, fence: number, value: string | Uint8Array, signal?: AbortSignal): Promise<void> {
    const body: W["FencedWrite"] = { name, fence, value_base64: toBase64(value) };
    await this.#t.call("POST", "/v1/fenced/write", { body, signal });
  }

  /** A server-kept value and the fence that wrote it (fence 0: never written). */
  async fencedRead(name: string, signal?: AbortSignal): Promise<FencedValue> {
    const v = await this.#t.call<W["FencedValue"]>("GET", "/v1/fenced/read", { query: { name }, signal });
    return { value: fromBase64(v.value_base64), text: v.value, fence: v.fence };
  }

  /**
   * Sends one API call as it is: method, path under the base URL (such as
   * "/v1/permits/acquire"), query and JSON body. For operations this client
   * has no method of its own for; the generated `paths` and `components`
   * types describe their bodies.
   */
  call<T>(method: "GET" | "POST", path: string, o: { query?: Record<string, string | number | undefined>; body?: unknown; signal?: AbortSignal } = {}): Promise<T> {
    return this.#t.call<T>(method, path, o);
  }

  /** Keeps the token out of console.log and JSON. */
  toJSON(): object {
    return { baseURL: this.#t.base };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return `Client { baseURL: ${JSON.stringify(this.#t.base)} }`;
  }
}
