import { formatDuration, parseDuration, type Duration } from "./duration.js";
import type { components } from "./schema.js";
import type { Transport } from "./transport.js";

type W = components["schemas"];

/** A rate limiting algorithm. */
export type Algorithm = NonNullable<W["RateRequest"]["algorithm"]>;

/** A quota: rate units per period (GCRA: with a bucket of burst, default rate). */
export interface Limit {
  /** Letters, digits, . _ -; default made from rate and period. */
  name?: string;
  rate: number;
  period: Duration;
  burst?: number;
}

/** The exact state key a limiter judges (as a Go limiter computes it). */
export type StateKey = W["StateKey"];

/** One limit to judge: the caller's `key` (the server derives the state key) or the exact `state`. */
export interface RateRequest {
  key?: string;
  state?: StateKey;
  limit: Limit;
  /** Default gcra (the server's default). */
  algorithm?: Algorithm;
  /** Cost. Default 1. */
  n?: number;
}

/** One decision, on the store's clock. */
export interface RateDecision {
  /** The units were admitted (peek: would be). */
  allowed: boolean;
  /** Units the limit would still admit now. */
  remaining: number;
  /** Denied: until the same request would pass, in ms. */
  retryAfterMs: number;
  /** Until the limit is fully available, in ms. */
  resetAfterMs: number;
  /** The limit as normalized (period in ms). */
  limit: { name: string; rate: number; periodMs: number; burst: number };
  algorithm: Algorithm;
  /** The store's clock. */
  at: Date;
  /** The state key judged. */
  state: StateKey;
}

/** The answer to allow: every request allowed, and one decision per request. */
export interface RateDecisions {
  allowed: boolean;
  decisions: RateDecision[];
  /** The longest retryAfterMs of the denied requests (0 when allowed). */
  retryAfterMs: number;
}

function wireRequest(r: RateRequest): W["RateRequest"] {
  const limit: W["Limit"] = { rate: r.limit.rate, period: formatDuration(r.limit.period) };
  if (r.limit.name !== undefined) limit.name = r.limit.name;
  if (r.limit.burst !== undefined) limit.burst = r.limit.burst;
  const out: W["RateRequest"] = { limit };
  if (r.key !== undefined) out.key = r.key;
  if (r.state !== undefined) out.state = r.state;
  if (r.algorithm !== undefined) out.algorithm = r.algorithm;
  if (r.n !== undefined) out.n = r.n;
  return out;
}

/** The rate limit operations of a {@link Client} (`client.limits`). */
export class Limits {
  readonly #t: Transport;

  /** @internal */
  constructor(t: Transport) {
    this.#t = t;
  }

  /**
   * Judges up to 16 limits in one atomic step on the store's clock: all are
   * consumed if all allow, none otherwise (`peek`: nothing is consumed).
   */
  async allow(requests: RateRequest | RateRequest[], o: { peek?: boolean; signal?: AbortSignal } = {}): Promise<RateDecisions> {
    const list = Array.isArray(requests) ? requests : [requests];
    const body: W["RateAllow"] = { requests: list.map(wireRequest) };
    if (o.peek) body.peek = true;
    const out = await this.#t.call<W["RateDecisions"]>("POST", "/v1/rate/allow", { body, signal: o.signal });
    const decisions = out.decisions.map(
      (d): RateDecision => ({
        allowed: d.allowed,
        remaining: d.remaining,
        retryAfterMs: parseDuration(d.retry_after),
        resetAfterMs: parseDuration(d.reset_after),
        limit: { name: d.limit.name ?? "", rate: d.limit.rate, periodMs: parseDuration(d.limit.period), burst: d.limit.burst ?? 0 },
        algorithm: d.algorithm,
        at: new Date(d.at),
        state: d.state,
      }),
    );
    const retryAfterMs = Math.max(0, ...decisions.filter((d) => !d.allowed).map((d) => d.retryAfterMs));
    return { allowed: out.allowed, decisions, retryAfterMs };
  }

  /** Forgets the state of limits: they are fully available again. */
  async reset(requests: RateRequest | RateRequest[], signal?: AbortSignal): Promise<void> {
    const list = Array.isArray(requests) ? requests : [requests];
    await this.#t.call("POST", "/v1/rate/reset", { body: { requests: list.map(wireRequest) } satisfies W["RateReset"], signal });
  }
}
