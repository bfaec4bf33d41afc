import { formatDuration, parseDuration, type Duration } from "./duration.js";
import {
  HeldError,
  InvalidError,
  LeaseLostError,
  LeaseReleasedError,
  LostError,
  NotHeldError,
  UnavailableError,
} from "./errors.js";
import type { components } from "./schema.js";
import { backoff, newToken, sleep, timeout, type Transport } from "./transport.js";

type W = components["schemas"];

/**
 * The safety margin between a holder's validity and the server's expiry:
 * a grant of ttl whose request was sent at time t is valid until
 * `t + ttl - (ttl * driftFactor + min(marginMs, ttl / 4))` on the
 * monotonic clock.
 */
export interface MarginOptions {
  /** The share of the TTL subtracted for clocks running at different rates, in [0, 0.5). Default 0.01. */
  driftFactor?: number;
  /**
   * A fixed time subtracted on top, at most a quarter of the TTL.
   * Default 50 ms (a Node event loop runs timers late more often than
   * Go's runtime does; tenure's Go Locker uses 2 ms).
   */
  marginMs?: number;
}

/** Options of {@link Leases.acquire}. */
export interface AcquireOptions {
  /**
   * The holder's secret token (visible ASCII, up to 128 bytes). Default: a
   * new random one. Give your own to keep a place in the key's queue
   * across attempts (`stay`).
   */
  token?: string;
  /**
   * How long the server waits for a held key before answering held (a
   * long poll, at most the server's max_wait). Default 0: answer at once.
   * The lease's validity counts from the request's send time, so time
   * spent waiting is taken from it: the lease is renewed at once when a
   * third of its TTL passed while waiting.
   */
  wait?: Duration;
  /**
   * Keep a place in the key's queue of waiters this long when refused:
   * an attempt with the same token within it keeps the place, and
   * waiters are served in arrival order. Default 0: no place.
   */
  stay?: Duration;
  /** A description of the holder for operators (node, purpose); never a secret. */
  holder?: string;
  /** Renew the lease every third of its TTL until released or lost. Default true. */
  keepAlive?: boolean;
  /** How many times a request whose outcome is unknown is sent (same token). Default 3. */
  attempts?: number;
  /** Ends the acquire (a request in flight fails with a TransportError). */
  signal?: AbortSignal;
}

/** The state of a lease key. */
export interface LeaseInfo {
  key: string;
  /** A lease is in force. */
  held: boolean;
  /** The current or last fence (0: never granted). */
  fence: number;
  /** The remaining time in ms, when held. */
  ttlMs: number;
  /** The holder's description, when it gave one. */
  holder?: string;
}

interface LeaseConfig {
  t: Transport;
  drift: number;
  fixed: number;
  releaseTimeoutMs: number;
}

function marginOf(c: LeaseConfig, ttl: number): number {
  return ttl * c.drift + Math.min(c.fixed, ttl / 4);
}

const now = () => performance.now();

function unrefTimer(fn: () => void, ms: number): NodeJS.Timeout {
  const t = setTimeout(fn, Math.max(0, ms));
  t.unref();
  return t;
}

/**
 * One tenure of a key: a secret token, a fence, and a validity measured on
 * the monotonic clock from the moment the request was sent, minus a safety
 * margin, so that it ends before the server can expire the lease.
 *
 * `signal` aborts the moment the lease is lost, its validity runs out (its
 * renewals got no answer in time) or it is released: pass it to the work
 * the lease protects, and pass `fence` (or the lease itself, to
 * `holderWrite`) to where the work's writes land.
 *
 * The token is the holder's secret: it is not shown by console.log or
 * JSON.stringify.
 */
export class Lease {
  /** The leased key. */
  readonly key: string;
  /** The fencing token: strictly greater than every fence granted for the key before. */
  readonly fence: number;
  /** The lease time asked for at acquisition and on each renewal, in ms. */
  readonly ttlMs: number;
  readonly #ttl: string;
  readonly #token: string;
  readonly #c: LeaseConfig;
  readonly #ac = new AbortController();
  #until: number;
  #sent: number;
  #granted: number;
  #err: Error | null = null;
  #expiry: NodeJS.Timeout | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #keepAlive = false;
  #fails = 0;
  #renewing: Promise<unknown> = Promise.resolve();
  #inFlight = 0;

  /** @internal */
  constructor(c: LeaseConfig, key: string, token: string, ttl: string, fence: number, granted: number, sent: number) {
    this.#c = c;
    this.key = key;
    this.#token = token;
    this.#ttl = ttl;
    this.ttlMs = parseDuration(ttl);
    this.fence = fence;
    this.#sent = sent;
    this.#granted = granted;
    this.#until = sent + granted - marginOf(c, granted);
    this.#armExpiry();
  }

  /** The holder's secret token: guards that check the current holder need it. Never log it. */
  get token(): string {
    return this.#token;
  }

  /** Aborts when the lease is lost, its validity runs out, or it is released; the reason says which. */
  get signal(): AbortSignal {
    return this.#ac.signal;
  }

  /**
   * null while the lease is valid; a {@link LeaseLostError} once it was lost
   * or its validity ran out; a {@link LeaseReleasedError} once released.
   */
  get error(): Error | null {
    if (this.#err === null && now() >= this.#until) this.#end(this.#expired());
    return this.#err;
  }

  /** Whether the lease is still valid on this process's clock. */
  get valid(): boolean {
    return this.error === null;
  }

  /** The time left of the client's validity, in ms (0 once ended). */
  get remainingMs(): number {
    return this.error === null ? Math.max(0, this.#until - now()) : 0;
  }

  /** Throws the lease's error once it is no longer valid. */
  throwIfLost(): void {
    const e = this.error;
    if (e) throw e;
  }

  /**
   * Extends the lease by its TTL from the moment the request is sent. If
   * the server says the token no longer holds the key, the lease ends and
   * the error is a {@link LeaseLostError} (cause: the {@link NotHeldError}).
   * Any other error (no answer) leaves the lease valid until its current
   * validity runs out.
   */
  renew(signal?: AbortSignal): Promise<void> {
    // One renewal at a time, so the validity follows the last one applied.
    const p = this.#renewing.then(() => this.#renewOnce(signal));
    this.#renewing = p.catch(() => undefined);
    return p;
  }

  async #renewOnce(signal?: AbortSignal): Promise<void> {
    this.throwIfLost();
    // A reply after the validity cannot help: the request is bounded by it.
    const deadline = timeout(this.#until - now());
    const sent = now();
    this.#inFlight++;
    let g: W["LeaseGrant"];
    try {
      g = await this.#c.t.call<W["LeaseGrant"]>("POST", "/v1/leases/renew", {
        body: { key: this.key, token: this.#token, ttl: this.#ttl } satisfies W["LeaseToken"],
        signal: signal ? AbortSignal.any([signal, deadline]) : deadline,
      });
    } catch (err) {
      if (err instanceof NotHeldError || err instanceof LostError) {
        this.#end(new LeaseLostError(`tenure: lease of ${JSON.stringify(this.key)} lost: ${err.message}`, this.key, this.fence, { cause: err }));
      }
      this.throwIfLost();
      throw err;
    } finally {
      this.#inFlight--;
    }
    this.throwIfLost();
    if (g.fence !== this.fence) {
      this.#end(new LeaseLostError(`tenure: lease of ${JSON.stringify(this.key)} lost: the server reports fence ${g.fence}, this lease has ${this.fence}`, this.key, this.fence));
      this.throwIfLost();
    }
    const granted = parseDuration(g.ttl);
    if (sent > this.#sent) {
      this.#sent = sent;
      this.#granted = granted;
      this.#until = sent + granted - marginOf(this.#c, granted);
      this.#armExpiry();
    }
  }

  /**
   * Ends the lease: only this tenure's token is released, a later holder
   * is never touched. The keep-alive stops first; a request whose outcome
   * is unknown is sent again (within 5 s). The lease counts as ended
   * afterwards whatever the result; a {@link NotHeldError} means it had
   * already expired or been taken.
   */
  async release(): Promise<void> {
    this.#stopKeepAlive();
    await this.#renewing;
    try {
      await releaseToken(this.#c, this.key, this.#token);
    } finally {
      this.#end(new LeaseReleasedError(this.key));
    }
  }

  /** @internal Starts renewing every third of the TTL. */
  startKeepAlive(): void {
    if (this.#err || this.#keepAlive) return;
    this.#keepAlive = true;
    this.#scheduleRenew(this.#sent + this.#granted / 3 - now());
  }

  #scheduleRenew(ms: number): void {
    clearTimeout(this.#renewTimer);
    if (!this.#keepAlive || this.#err) return;
    this.#renewTimer = unrefTimer(() => void this.#tick(), ms);
  }

  async #tick(): Promise<void> {
    if (!this.#keepAlive || this.#err) return;
    try {
      await this.renew();
      this.#fails = 0;
      this.#scheduleRenew(this.#sent + this.#granted / 3 - now());
    } catch {
      if (this.#err) return;
      // No answer: again soon, while the lease is valid.
      this.#fails++;
      this.#scheduleRenew(Math.min(backoff(this.#fails, 10, 500), this.#granted / 6));
    }
  }

  #stopKeepAlive(): void {
    this.#keepAlive = false;
    clearTimeout(this.#renewTimer);
  }

  #armExpiry(): void {
    clearTimeout(this.#expiry);
    if (this.#err) return;
    this.#expiry = unrefTimer(() => {
      if (now() >= this.#until) this.#end(this.#expired());
      else this.#armExpiry(); // fired early
    }, this.#until - now());
  }

  #expired(): LeaseLostError {
    const how = this.#inFlight > 0 || this.#fails > 0 ? " (its renewals got no answer in time)" : "";
    return new LeaseLostError(`tenure: validity of the lease of ${JSON.stringify(this.key)} ran out${how}`, this.key, this.fence);
  }

  #end(err: Error): void {
    if (this.#err) return;
    this.#err = err;
    this.#stopKeepAlive();
    clearTimeout(this.#expiry);
    this.#ac.abort(err);
  }

  /** Describes the lease without its token. */
  toString(): string {
    return `Lease { key: ${JSON.stringify(this.key)}, fence: ${this.fence}, token: REDACTED }`;
  }
  toJSON(): object {
    return { key: this.key, fence: this.fence, ttl_ms: this.ttlMs, token: "REDACTED" };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

/** Releases key held by token, sending the request again while its outcome is unknown. */
async function releaseToken(c: LeaseConfig, key: string, token: string): Promise<void> {
  const deadline = now() + c.releaseTimeoutMs;
  for (let attempt = 1; ; attempt++) {
    try {
      await c.t.call("POST", "/v1/leases/release", {
        body: { key, token } satisfies W["LeaseToken"],
        signal: timeout(deadline - now()),
      });
      return;
    } catch (err) {
      const wait = backoff(attempt);
      if (!(err instanceof UnavailableError) || now() + wait >= deadline) throw err;
      await sleep(wait);
    }
  }
}

/** The lease operations of a {@link Client} (`client.leases`). */
export class Leases {
  readonly #c: LeaseConfig;

  /** @internal */
  constructor(t: Transport, o: MarginOptions = {}) {
    const drift = o.driftFactor ?? 0.01;
    const fixed = o.marginMs ?? 50;
    if (!(drift >= 0 && drift < 0.5)) throw new RangeError(`tenure: driftFactor ${drift} must be in [0, 0.5)`);
    if (!(fixed >= 0)) throw new RangeError(`tenure: marginMs ${fixed} must not be negative`);
    this.#c = { t, drift, fixed, releaseTimeoutMs: 5000 };
  }

  /**
   * Acquires key for ttl and returns the lease, kept alive (renewed every
   * third of its TTL) unless `keepAlive: false`. Another holder's key
   * fails with a {@link HeldError} (its `ttlMs`, `holder`, `position`),
   * after waiting up to `wait` on the server.
   *
   * A request whose outcome is unknown is sent again with the same token,
   * which the server answers with the same grant if the first one applied;
   * if the outcome stays unknown the token is released in the background,
   * so no lease is left behind for a whole TTL.
   */
  async acquire(key: string, ttl: Duration, o: AcquireOptions = {}): Promise<Lease> {
    const token = o.token ?? newToken();
    const attempts = o.attempts ?? 3;
    const body: W["AcquireLease"] = { key, token, ttl: formatDuration(ttl) };
    if (o.wait !== undefined) body.wait = formatDuration(o.wait);
    if (o.stay !== undefined) body.stay = formatDuration(o.stay);
    if (o.holder !== undefined) body.holder = o.holder;
    let g: W["LeaseGrant"];
    let sent: number;
    for (let attempt = 1; ; attempt++) {
      sent = now();
      try {
        g = await this.#c.t.call<W["LeaseGrant"]>("POST", "/v1/leases/acquire", { body, signal: o.signal });
        break;
      } catch (err) {
        if (err instanceof HeldError || err instanceof InvalidError) throw err;
        // The request may have been applied.
        const unknown = err instanceof UnavailableError;
        if (!unknown || attempt >= attempts || o.signal?.aborted || !(await sleep(backoff(attempt), o.signal))) {
          if (unknown) this.#cleanup(key, token);
          throw err;
        }
      }
    }
    let granted = parseDuration(g.ttl);
    // A third of the TTL passed before the answer (a long wait): renew now,
    // so the lease starts with a validity of its own.
    if (o.keepAlive !== false && now() >= sent + granted / 3) {
      const rsent = now();
      try {
        const r = await this.#c.t.call<W["LeaseGrant"]>("POST", "/v1/leases/renew", {
          body: { key, token, ttl: body.ttl } satisfies W["LeaseToken"],
          signal: timeout(sent + granted - marginOf(this.#c, granted) - now()),
        });
        if (r.fence === g.fence) {
          sent = rsent;
          granted = parseDuration(r.ttl);
        }
      } catch (err) {
        if (err instanceof NotHeldError) {
          throw new LeaseLostError(`tenure: lease of ${JSON.stringify(key)} lost while its grant was on its way: ${err.message}`, key, g.fence, { cause: err });
        }
      }
    }
    const lease = new Lease(this.#c, key, token, body.ttl, g.fence, granted, sent);
    if (lease.error) {
      this.#cleanup(key, token);
      throw lease.error;
    }
    if (o.keepAlive !== false) lease.startKeepAlive();
    return lease;
  }

  /**
   * Acquires key (as {@link acquire}), keeps the lease alive while fn runs
   * and releases it afterwards, however fn ends. fn gets the lease: pass
   * `lease.signal` to its work and `lease.fence` (or the lease, to
   * holderWrite) to its writes. If the lease was lost while fn ran, the
   * result is a {@link LeaseLostError} (its cause: fn's error, if any):
   * work done after the loss may have overlapped with another holder's.
   */
  async withLease<T>(key: string, ttl: Duration, fn: (lease: Lease) => Promise<T>, o: Omit<AcquireOptions, "keepAlive"> = {}): Promise<T> {
    const lease = await this.acquire(key, ttl, { ...o, keepAlive: true });
    let value: T | undefined;
    let fnErr: unknown;
    let threw = false;
    try {
      value = await fn(lease);
    } catch (err) {
      threw = true;
      fnErr = err;
    }
    const lost = lease.error;
    await lease.release().catch(() => undefined);
    if (lost instanceof LeaseLostError) {
      throw threw ? new LeaseLostError(`${lost.message} while running`, key, lease.fence, { cause: fnErr }) : lost;
    }
    if (threw) throw fnErr;
    return value as T;
  }

  /** Gives up the place token keeps in key's queue of waiters (an acquire with `stay` whose caller stopped waiting). */
  async leave(key: string, token: string, signal?: AbortSignal): Promise<void> {
    await this.#c.t.call("POST", "/v1/leases/leave", { body: { key, token } satisfies W["LeaseToken"], signal });
  }

  /** The state of key, unchanged. */
  async inspect(key: string, signal?: AbortSignal): Promise<LeaseInfo> {
    const i = await this.#c.t.call<W["LeaseInfo"]>("GET", "/v1/leases/inspect", { query: { key }, signal });
    return leaseInfo(i);
  }

  /** The keys the server's store remembers under prefix, in key order; `next` is the `after` of the next page. */
  async list(o: { prefix?: string; after?: string; limit?: number; signal?: AbortSignal } = {}): Promise<{ leases: LeaseInfo[]; next?: string }> {
    const l = await this.#c.t.call<W["LeaseList"]>("GET", "/v1/leases", {
      query: { prefix: o.prefix, after: o.after, limit: o.limit },
      signal: o.signal,
    });
    const out: { leases: LeaseInfo[]; next?: string } = { leases: l.leases.map(leaseInfo) };
    if (l.next) out.next = l.next;
    return out;
  }

  #cleanup(key: string, token: string): void {
    releaseToken(this.#c, key, token).catch(() => undefined);
  }
}

function leaseInfo(i: W["LeaseInfo"]): LeaseInfo {
  const out: LeaseInfo = { key: i.key, held: i.held, fence: i.fence, ttlMs: parseDuration(i.ttl) };
  if (i.holder) out.holder = i.holder;
  return out;
}
