import { formatDuration, parseDuration, type Duration } from "./duration.js";
import { InProgressError, InvalidError, LostError, MismatchError, UnavailableError } from "./errors.js";
import type { components } from "./schema.js";
import { backoff, fromBase64, newToken, sleep, timeout, toBase64, type Transport } from "./transport.js";

type W = components["schemas"];

/** One logical request: its record is (scope, key). */
export interface IdempotencyRequest {
  /** The principal and the operation, e.g. "user:42 POST /payments": equal keys in different scopes never meet. */
  scope: string;
  /** The client's idempotency key (1 to 255 bytes of printable ASCII). */
  key: string;
  /**
   * A digest of the request's input: a later request with the same key and
   * another fingerprint is refused with a {@link MismatchError}. Leave it
   * out (and `request`) not to check the input.
   */
  fingerprint?: string;
  /**
   * Instead of `fingerprint`: the HTTP request the key guards; the server
   * computes the fingerprint tenure's Go middleware records, so services
   * in Go and in TypeScript share keys.
   */
  request?: { method: string; uri: string; contentType?: string; body?: string | Uint8Array };
}

/** Options of {@link Idempotency.run}. */
export interface RunOptions<T> {
  /** The claim's time on the server's clock, renewed every third of it while fn runs. Default 30 s. */
  claimTtl?: Duration;
  /** How long the result is kept and replayed. Default 24 h. */
  retention?: Duration;
  /** While an earlier request with the key holds its claim, wait for its result instead of failing with {@link InProgressError}. */
  wait?: boolean;
  /**
   * An earlier attempt's claim that expired without a result: take it over
   * and run fn again under a greater fence (for fn whose effects are
   * themselves idempotent or fenced). Default false: {@link UnknownOutcomeError}.
   */
  rerunAbandoned?: boolean;
  /** Record and replay every error fn throws, as if wrapped in {@link FinalError}. Default false: only FinalErrors are recorded. */
  storeErrors?: boolean;
  /** Turns fn's value into the recorded bytes. Default: JSON. */
  encode?: (value: T) => Uint8Array | string;
  /** Turns recorded bytes back into a value. Default: JSON (empty bytes: undefined). */
  decode?: (bytes: Uint8Array) => T;
  /** Ends a wait (`wait`) and is passed on to fn's claim signal. */
  signal?: AbortSignal;
  /** The safety margin of the claim's validity (see MarginOptions). Defaults 0.01 and 50 ms. */
  driftFactor?: number;
  marginMs?: number;
}

/** What fn gets: the claim's fence (for a resource-side guard) and a signal that aborts when the claim is lost or its validity runs out. */
export interface Claim {
  readonly scope: string;
  readonly key: string;
  readonly fence: number;
  readonly signal: AbortSignal;
}

/** What run returns: fn's value, first time or replayed. */
export interface IdempotentResult<T> {
  value: T;
  /** The value was recorded by an earlier call and fn did not run now. */
  replayed: boolean;
}

/**
 * Marks an error as the final outcome of a request: run records its message
 * and replays it (as a FinalError with `replayed` true) to every later
 * request with the key, instead of releasing the claim for a retry.
 */
export class FinalError extends Error {
  override name = "FinalError";
  /** The error was recorded by an earlier call (its message is the recorded one). */
  readonly replayed: boolean;
  constructor(message: string, options?: { cause?: unknown; replayed?: boolean }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.replayed = options?.replayed ?? false;
  }
}

/**
 * The outcome of a request is unknown: an earlier attempt's claim expired
 * without a result (`ran` false: it may have applied its effect before it
 * died; reconcile, then run with rerunAbandoned), or this attempt ran fn
 * and its result could not be recorded (`ran` true, cause: the error).
 */
export class UnknownOutcomeError extends Error {
  override name = "UnknownOutcomeError";
  constructor(
    message: string,
    readonly scope: string,
    readonly key: string,
    readonly fence: number,
    readonly ran: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** This attempt's claim was lost while fn ran (another attempt took it over): its result does not stand. The cause is fn's error, if any. */
export class ClaimLostError extends Error {
  override name = "ClaimLostError";
  constructor(
    message: string,
    readonly scope: string,
    readonly key: string,
    readonly fence: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

const now = () => performance.now();

/** The idempotency operations of a {@link Client} (`client.idempotency`). */
export class Idempotency {
  readonly #t: Transport;

  /** @internal */
  constructor(t: Transport) {
    this.#t = t;
  }

  /**
   * Runs fn at most once for req and returns its value; later calls with
   * the same scope and key replay the recorded value (`replayed` true):
   *
   * - same key, other input: {@link MismatchError}, fn not run;
   * - an earlier call still holds the claim: {@link InProgressError}
   *   (`retryAfterMs`), or with `wait` its result once recorded;
   * - an earlier call's claim expired without a result: {@link UnknownOutcomeError}
   *   (or with `rerunAbandoned`, fn runs again under a greater fence);
   * - the server cannot be reached: an {@link UnavailableError}, fn not run.
   *
   * While fn runs the claim is kept alive; its signal aborts when the claim
   * is lost or its validity runs out. If fn throws, the claim is released
   * (a retry runs fn again) unless the error is a {@link FinalError} (or
   * `storeErrors`): then it is recorded and replayed.
   */
  async run<T>(req: IdempotencyRequest, fn: (claim: Claim) => Promise<T>, o: RunOptions<T> = {}): Promise<IdempotentResult<T>> {
    const claimTtl = formatDuration(o.claimTtl ?? 30_000);
    const claimMs = parseDuration(claimTtl);
    const retention = formatDuration(o.retention ?? 86_400_000);
    const encode = o.encode ?? ((v: T) => (v === undefined ? "" : JSON.stringify(v)));
    const decode = o.decode ?? ((b: Uint8Array) => (b.length === 0 ? undefined : JSON.parse(Buffer.from(b).toString("utf8"))) as T);
    const token = newToken();
    const id = { scope: req.scope, key: req.key };
    const body: W["IdemBegin"] = { ...id, token, claim_ttl: claimTtl, retention };
    if (req.fingerprint !== undefined) body.fingerprint = req.fingerprint;
    if (req.request) {
      body.request = { method: req.request.method, uri: req.request.uri };
      if (req.request.contentType !== undefined) body.request.content_type = req.request.contentType;
      if (req.request.body !== undefined) body.request.body = toBase64(req.request.body);
    }
    if (o.rerunAbandoned) body.takeover = true;

    let b: W["IdemBegun"];
    let sent: number;
    for (let attempt = 1; ; attempt++) {
      sent = now();
      try {
        b = await this.#t.call<W["IdemBegun"]>("POST", "/v1/idempotency/begin", { body, signal: o.signal });
        break;
      } catch (err) {
        if (err instanceof InProgressError && o.wait) {
          const wait = Math.min(backoff(attempt), err.retryAfterMs > 0 ? err.retryAfterMs : Infinity);
          if (await sleep(wait, o.signal)) continue;
          throw new InProgressError({ ...err.problem, detail: `gave up waiting for key ${JSON.stringify(req.key)}: ${err.detail ?? ""}` });
        }
        if (err instanceof UnavailableError) this.#release(id, token).catch(() => undefined); // the claim may have applied
        throw err;
      }
    }
    switch (b.state) {
      case "completed": {
        const out = b.outcome ?? {};
        if (out.failed) throw new FinalError(out.message ?? "", { replayed: true });
        return { value: decode(fromBase64(out.value)), replayed: true };
      }
      case "abandoned":
        throw new UnknownOutcomeError(
          `tenure: key ${JSON.stringify(req.key)} in scope ${JSON.stringify(req.scope)}: an earlier attempt's claim (fence ${b.fence ?? 0}) expired without a recorded result; reconcile, then run with rerunAbandoned`,
          req.scope, req.key, b.fence ?? 0, false);
      case "claimed":
        break;
      default:
        throw new UnavailableError({ type: "urn:tenure:problem:internal", title: "malformed answer", status: 200, detail: `unknown state ${JSON.stringify(b.state)}` });
    }
    const fence = b.fence ?? 0;
    const keeper = new ClaimKeeper(this.#t, id, token, fence, claimTtl, parseDuration(b.ttl) || claimMs, sent, o);
    let value: T | undefined;
    let fnErr: unknown;
    let threw = false;
    try {
      value = await fn({ ...id, fence, signal: keeper.signal });
    } catch (err) {
      threw = true;
      fnErr = err;
    }
    const lost = keeper.stop();
    const lostErr = (cause: unknown) =>
      new ClaimLostError(
        `tenure: key ${JSON.stringify(req.key)} in scope ${JSON.stringify(req.scope)}: this attempt's claim (fence ${fence}) was lost and its result does not stand`,
        req.scope, req.key, fence, { cause });
    const final = threw && (o.storeErrors || fnErr instanceof FinalError);
    if (threw && !final) {
      let rerr: unknown;
      await this.#release(id, token).catch((e) => (rerr = e));
      if (lost || rerr instanceof LostError) throw lostErr(fnErr);
      throw fnErr;
    }
    const outcome: W["IdemOutcome"] = {};
    let finalErr: FinalError | undefined;
    if (threw) {
      finalErr = fnErr instanceof FinalError ? fnErr : new FinalError(fnErr instanceof Error ? fnErr.message : String(fnErr), { cause: fnErr });
      outcome.failed = true;
      outcome.message = cleanMessage(finalErr.message);
    } else {
      const bytes = encode(value as T);
      if (bytes.length > 0) outcome.value = toBase64(bytes);
    }
    try {
      await this.#complete(id, token, fence, outcome, retention, claimMs);
    } catch (err) {
      if (err instanceof LostError) throw lostErr(threw ? fnErr : err);
      throw new UnknownOutcomeError(
        `tenure: key ${JSON.stringify(req.key)} in scope ${JSON.stringify(req.scope)}: fn ran and its result could not be recorded: ${(err as Error).message}`,
        req.scope, req.key, fence, true, { cause: err });
    }
    if (finalErr) throw finalErr;
    return { value: value as T, replayed: false };
  }

  /** An idempotency record, unchanged. */
  async inspect(scope: string, key: string, signal?: AbortSignal): Promise<W["IdemRecord"]> {
    return this.#t.call<W["IdemRecord"]>("GET", "/v1/idempotency/inspect", { query: { scope, key }, signal });
  }

  /** Records the outcome, sending it again while unknown, for at most a claim TTL. */
  async #complete(id: { scope: string; key: string }, token: string, fence: number, outcome: W["IdemOutcome"], retention: string, claimMs: number): Promise<void> {
    const deadline = now() + claimMs;
    const per = Math.max(claimMs / 3, 1000);
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#t.call("POST", "/v1/idempotency/complete", {
          body: { ...id, token, fence, outcome, retention } satisfies W["IdemClaim"],
          signal: timeout(per),
        });
        return;
      } catch (err) {
        if (!(err instanceof UnavailableError) || now() > deadline) throw err;
        await sleep(backoff(attempt));
      }
    }
  }

  /** Drops the claim, sending it again while unknown (within 5 s). */
  async #release(id: { scope: string; key: string }, token: string): Promise<void> {
    const deadline = now() + 5000;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#t.call("POST", "/v1/idempotency/release", {
          body: { ...id, token } satisfies W["IdemClaim"],
          signal: timeout(deadline - now()),
        });
        return;
      } catch (err) {
        if (!(err instanceof UnavailableError) || err instanceof InvalidError || now() > deadline) throw err;
        await sleep(backoff(attempt));
      }
    }
  }
}

/** Keeps a claim alive while fn runs: renews every third of its TTL, aborts its signal before the server can expire it. */
class ClaimKeeper {
  readonly #ac = new AbortController();
  #until: number;
  #sent: number;
  #granted: number;
  #timer: NodeJS.Timeout | undefined;
  #expiry: NodeJS.Timeout | undefined;
  #stopped = false;
  #fails = 0;
  readonly #margin: (ttl: number) => number;

  constructor(
    readonly t: Transport,
    readonly id: { scope: string; key: string },
    readonly token: string,
    readonly fence: number,
    readonly ttl: string,
    granted: number,
    sent: number,
    o: { driftFactor?: number; marginMs?: number; signal?: AbortSignal },
  ) {
    const drift = o.driftFactor ?? 0.01;
    const fixed = o.marginMs ?? 50;
    this.#margin = (ttl) => ttl * drift + Math.min(fixed, ttl / 4);
    this.#sent = sent;
    this.#granted = granted;
    this.#until = sent + granted - this.#margin(granted);
    if (o.signal) {
      if (o.signal.aborted) this.#ac.abort(o.signal.reason);
      else o.signal.addEventListener("abort", () => this.#ac.abort(o.signal!.reason), { once: true });
    }
    this.#arm();
    this.#schedule(sent + granted / 3 - now());
  }

  get signal(): AbortSignal {
    return this.#ac.signal;
  }

  /** Stops renewing; returns the error that ended the claim, if it was lost or ran out. */
  stop(): Error | null {
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearTimeout(this.#expiry);
    if (!this.#ac.signal.aborted && now() >= this.#until) this.#lose(new Error("tenure: the claim's validity ran out"));
    const r = this.#ac.signal.reason;
    return this.#ac.signal.aborted && r instanceof Error && r.name === "ClaimLostError" ? r : null;
  }

  #lose(cause: Error): void {
    if (this.#ac.signal.aborted) return;
    this.#ac.abort(new ClaimLostError(`tenure: claim of key ${JSON.stringify(this.id.key)} in scope ${JSON.stringify(this.id.scope)} ended: ${cause.message}`, this.id.scope, this.id.key, this.fence, { cause }));
  }

  #arm(): void {
    clearTimeout(this.#expiry);
    this.#expiry = setTimeout(() => {
      if (now() >= this.#until) this.#lose(new Error("its validity ran out"));
      else this.#arm();
    }, Math.max(0, this.#until - now()));
    this.#expiry.unref();
  }

  #schedule(ms: number): void {
    clearTimeout(this.#timer);
    if (this.#stopped || this.#ac.signal.aborted) return;
    this.#timer = setTimeout(() => void this.#tick(), Math.max(0, ms));
    this.#timer.unref();
  }

  async #tick(): Promise<void> {
    const sent = now();
    try {
      await this.t.call("POST", "/v1/idempotency/renew", {
        body: { ...this.id, token: this.token, fence: this.fence, ttl: this.ttl } satisfies W["IdemClaim"],
        signal: timeout(this.#until - now()),
      });
      if (this.#stopped) return;
      this.#fails = 0;
      this.#sent = sent;
      this.#granted = parseDuration(this.ttl);
      this.#until = sent + this.#granted - this.#margin(this.#granted);
      this.#arm();
      this.#schedule(this.#sent + this.#granted / 3 - now());
    } catch (err) {
      if (this.#stopped) return;
      if (err instanceof LostError) return this.#lose(err);
      this.#fails++;
      this.#schedule(Math.min(backoff(this.#fails, 10, 500), this.#granted / 6));
    }
  }
}

/** The message of a final error as the server keeps it: valid UTF-8 without NUL, at most 4096 bytes. */
function cleanMessage(msg: string): string {
  let s = msg.replaceAll("\u0000", "\uFFFD");
  let b = Buffer.from(s, "utf8");
  if (b.length <= 4096) return s;
  let n = 4096;
  while (n > 0 && (b[n]! & 0xc0) === 0x80) n--;
  return b.subarray(0, n).toString("utf8");
}
