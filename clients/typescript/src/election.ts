import { hostname } from "node:os";
import { formatDuration, parseDuration, type Duration } from "./duration.js";
import { HeldError, NotHeldError } from "./errors.js";
import type { Lease, Leases } from "./lease.js";
import { backoff, newToken, sleep, timeout } from "./transport.js";

/** Put before an election's name to make its lease key, as tenure's Go package election does. */
export const ELECTION_KEY_PREFIX = "election/";

/** The term's lease TTL when {@link ElectionOptions.ttl} is not given: 15 s. */
export const DEFAULT_ELECTION_TTL_MS = 15_000;

/** The longest {@link Election.observe} waits between two reads when {@link ElectionOptions.observeEvery} is not given: 1 s. */
export const DEFAULT_OBSERVE_EVERY_MS = 1_000;

/** Options of an {@link Election} (`client.election(name, options)`). */
export interface ElectionOptions {
  /**
   * The term's lease: how long the server keeps the term of a leader that
   * stopped renewing it (crashed, paused, cut off) before another
   * campaigner can lead. The leader renews it every third of it. Default
   * 15 s; 1 ms to 24 h.
   */
  ttl?: Duration;
  /**
   * Describes this campaigner (host, pod, process) in {@link Election.leader}:
   * at most 128 bytes of printable UTF-8, never a secret. Default: the host
   * name and process ID ("host-1234").
   */
  holder?: string;
  /**
   * The longest {@link Election.observe} waits between two reads of the
   * leader (it also reads again when the leader's remaining time runs out).
   * Default 1 s.
   */
  observeEvery?: Duration;
  /**
   * How long each of a campaign's requests waits on the server for the
   * term (a long poll): at most the server's `max_wait` (30 s unless
   * configured), and never more than half the TTL. Default 10 s.
   */
  wait?: Duration;
  /**
   * How long the server keeps a campaigner's place in the queue between
   * two of its requests: a campaigner that stopped (crashed) without
   * leaving loses its place after it. Default 1.5 s.
   */
  stay?: Duration;
}

/** Options of {@link Election.observe}. */
export interface ObserveOptions {
  /**
   * Called with the error of a read that failed (the server could not be
   * reached); the read is retried after `observeEvery`. Default: none.
   */
  onError?: (err: unknown) => void;
}

/** Who leads an election, as the server reported it. */
export interface Leader {
  /** The leader's holder description ("" when it gave none, or when no one leads). */
  holder: string;
  /** Its term's fence; 0 when no one leads. */
  fence: number;
  /** The time its term had left when read, in ms (0 when no one leads). */
  ttlMs: number;
  /** Whether someone leads. */
  elected: boolean;
}

const noLeader = (): Leader => ({ holder: "", fence: 0, ttlMs: 0, elected: false });

/** The host name and process ID, printable, at most 128 bytes (as tenure's Go lease.DefaultHolder). */
function defaultHolder(): string {
  let host = "";
  try {
    host = hostname();
  } catch {
    // none
  }
  host = host.replace(/[^\p{L}\p{M}\p{N}\p{P}\p{S} ]/gu, "") || "unknown-host";
  const pid = `-${process.pid}`;
  const enc = new TextEncoder();
  while (host !== "" && enc.encode(host + pid).length > 128) host = [...host].slice(0, -1).join("");
  return host + pid;
}

function positive(what: string, d: Duration, max = 24 * 3_600_000): number {
  formatDuration(d); // refuses what does not parse or is negative
  const ms = parseDuration(d);
  if (!(ms >= 1 && ms <= max)) throw new RangeError(`tenure: election ${what} ${JSON.stringify(d)} out of range [1ms, ${max}ms]`);
  return ms;
}

/**
 * One leader's term: a lease on the election's key, kept alive (renewed
 * every third of the TTL) until {@link resign} or until it ends.
 *
 * `signal` aborts (and `done` resolves) when the term ends: resigned (the
 * reason is a {@link LeaseReleasedError}), its validity run out without a
 * renewal, or a renewal refused (a {@link LeaseLostError}). The validity
 * is counted from when the grant or renewal request was sent, minus a
 * safety margin, so when renewals get no answer the signal fires before
 * the server can expire the term and another campaigner can lead. A term
 * the server ended itself (its lease released with its token, by an
 * operator) is noticed at the next renewal, up to a third of the TTL
 * later, when another campaigner may lead already: pass the term's
 * `lease` (or `fence`) to the guards where its writes land, which turn
 * an ended term's writes away, and `signal` to the leader's work.
 *
 * The lease's token is not shown by console.log or JSON.stringify.
 */
export class Term {
  /** The election's name. */
  readonly name: string;
  /** The election's lease key. */
  readonly key: string;
  /** The term's fence: greater than every earlier term's. */
  readonly fence: number;
  /** This campaigner's holder description. */
  readonly holder: string;
  /** The term's lease TTL, in ms. */
  readonly ttlMs: number;
  /** Resolves with the reason (the signal's) when the term ends; never rejects. */
  readonly done: Promise<Error>;
  readonly #lease: Lease;

  /** @internal */
  constructor(name: string, holder: string, lease: Lease) {
    this.name = name;
    this.key = lease.key;
    this.fence = lease.fence;
    this.holder = holder;
    this.ttlMs = lease.ttlMs;
    this.#lease = lease;
    const signal = lease.signal;
    this.done = new Promise((resolve) => {
      if (signal.aborted) return resolve(signal.reason as Error);
      signal.addEventListener("abort", () => resolve(signal.reason as Error), { once: true });
    });
  }

  /**
   * The term's lease, for the holder-checked write (`client.holderWrite(term.lease, …)`),
   * which the server refuses once the term ended, even before the next
   * leader wrote. Its token is a secret: never log it.
   */
  get lease(): Lease {
    return this.#lease;
  }

  /** Aborts when the term ends (see {@link Term}); the reason says why. */
  get signal(): AbortSignal {
    return this.#lease.signal;
  }

  /** null while the term lasts; then the reason it ended. */
  get error(): Error | null {
    return this.#lease.error;
  }

  /** Whether the term still lasts on this process's clock. */
  get valid(): boolean {
    return this.#lease.valid;
  }

  /** The time left of the term's validity on this process's clock, in ms (0 once ended). */
  get remainingMs(): number {
    return this.#lease.remainingMs;
  }

  /**
   * Ends the term: the renewals stop and the lease is released, so the
   * next campaigner leads at once. Resigning a term that had ended already
   * is not an error. A server that cannot be reached within 5 s is an
   * {@link UnavailableError}: the term still ends here, and on the server
   * when its TTL runs out.
   */
  async resign(): Promise<void> {
    try {
      await this.#lease.release();
    } catch (err) {
      if (err instanceof NotHeldError) return;
      throw err;
    }
  }

  /** Describes the term without its token. */
  toString(): string {
    return `Term { name: ${JSON.stringify(this.name)}, fence: ${this.fence}, holder: ${JSON.stringify(this.holder)} }`;
  }
  toJSON(): object {
    return { name: this.name, key: this.key, fence: this.fence, holder: this.holder, ttl_ms: this.ttlMs };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

/**
 * A leader election on tenure serve (`client.election(name, options)`):
 * one leader at a time for a name, its term fenced like any lease, the
 * other campaigners waiting in the server's queue in arrival order. It is
 * the lease `election/<name>`, the same key as tenure's Go package
 * election uses, so Go and TypeScript instances campaign in one election
 * and `tenure election list` shows its leader.
 */
export class Election {
  /** The election's name. */
  readonly name: string;
  /** The election's lease key ("election/" + name). */
  readonly key: string;
  /** This campaigner's holder description. */
  readonly holder: string;
  /** The term's lease TTL, in ms. */
  readonly ttlMs: number;
  /** The longest observe waits between two reads, in ms. */
  readonly observeEveryMs: number;
  readonly #leases: Leases;
  readonly #waitMs: number;
  readonly #stayMs: number;

  /** @internal */
  constructor(leases: Leases, name: string, o: ElectionOptions = {}) {
    if (typeof name !== "string" || name === "") throw new RangeError("tenure: election name must not be empty");
    if (name.includes("\0")) throw new RangeError("tenure: election name contains NUL");
    const key = ELECTION_KEY_PREFIX + name;
    if (new TextEncoder().encode(key).length > 512) throw new RangeError(`tenure: election key is longer than 512 bytes`);
    this.#leases = leases;
    this.name = name;
    this.key = key;
    this.ttlMs = o.ttl === undefined ? DEFAULT_ELECTION_TTL_MS : positive("ttl", o.ttl);
    this.observeEveryMs = o.observeEvery === undefined ? DEFAULT_OBSERVE_EVERY_MS : positive("observeEvery", o.observeEvery);
    const wait = o.wait === undefined ? 10_000 : positive("wait", o.wait, 10 * 60_000);
    // A grant that arrives at the end of a long poll still leaves time for
    // the renewal that starts its validity afresh.
    this.#waitMs = Math.max(1, Math.floor(Math.min(wait, this.ttlMs / 2)));
    this.#stayMs = o.stay === undefined ? 1_500 : positive("stay", o.stay);
    this.holder = o.holder ?? defaultHolder();
  }

  /**
   * Waits until this campaigner leads, in arrival order among the
   * campaigners, and returns its term, kept alive until
   * {@link Term.resign} or until it ends. `signal` bounds the wait only:
   * when it aborts first, the campaign gives up its place in the queue and
   * rejects with the signal's reason. Another error (the server could not
   * be reached after a few attempts, bad input) gives up the place too and
   * rejects with it; campaign again to wait anew.
   */
  async campaign(signal?: AbortSignal): Promise<Term> {
    signal?.throwIfAborted();
    // One token for the whole campaign: it keeps this campaigner's place
    // in the key's queue from one long poll to the next.
    const token = newToken();
    const wait = formatDuration(this.#waitMs);
    const stay = formatDuration(this.#stayMs);
    try {
      for (let early = 0; ; ) {
        const sent = performance.now();
        try {
          const lease = await this.#leases.acquire(this.key, this.ttlMs, { token, wait, stay, holder: this.holder, signal });
          return new Term(this.name, this.holder, lease);
        } catch (err) {
          if (!(err instanceof HeldError)) throw err;
        }
        signal?.throwIfAborted();
        // A refusal well before the wait ended (a server shutting down
        // answers at once): pause briefly, within the place's stay.
        if (performance.now() - sent < this.#waitMs / 2) {
          early++;
          if (!(await sleep(Math.min(backoff(early, 10, 250), this.#stayMs / 3), signal))) signal?.throwIfAborted();
        } else {
          early = 0;
        }
      }
    } catch (err) {
      this.#leave(token);
      if (signal?.aborted) throw signal.reason;
      throw err;
    }
  }

  #leave(token: string): void {
    this.#leases.leave(this.key, token, timeout(5_000)).catch(() => undefined);
  }

  /**
   * Reads who leads now; when no one does, `elected` is false and `fence`
   * 0. A server that cannot be reached is an error (an
   * {@link UnavailableError}), never "no leader".
   */
  async leader(signal?: AbortSignal): Promise<Leader> {
    const info = await this.#leases.inspect(this.key, signal);
    if (!info.held) return noLeader();
    return { holder: info.holder ?? "", fence: info.fence, ttlMs: info.ttlMs, elected: true };
  }

  /**
   * Follows the election's leader until `signal` aborts (or the loop
   * stops): yields the leader when it first reads it and again whenever it
   * changes (another term, or no one leading). Every leader it yields was
   * the server's leader when read, and terms come in order: a term's fence
   * is never yielded after a greater one. It reads every `observeEvery`
   * (default 1 s), and at the latest when the current leader's remaining
   * time runs out (every 20 ms to 100 ms while the server reports a term
   * with no time left that has not ended yet, as it does on etcd for the
   * last second of a lease). A read that fails goes to `onError` and is
   * retried.
   */
  async *observe(signal?: AbortSignal, o: ObserveOptions = {}): AsyncGenerator<Leader, void, undefined> {
    let first = true;
    let last = 0;
    let highest = 0;
    let zeroOf = 0; // the term last read with no time left,
    let atZero = 0; // and how many reads in a row said so
    while (!signal?.aborted) {
      let wait = this.observeEveryMs;
      let cur: Leader | undefined;
      try {
        cur = await this.leader(signal);
      } catch (err) {
        if (signal?.aborted) return;
        o.onError?.(err);
      }
      // An older term than one already yielded (a server that lost its
      // data, a read answered late) is not reported.
      if (cur && !(cur.fence !== 0 && cur.fence < highest)) {
        if (first || cur.fence !== last) {
          first = false;
          last = cur.fence;
          highest = Math.max(highest, cur.fence);
          yield cur;
        }
        if (cur.elected && cur.ttlMs > 0) {
          zeroOf = 0;
          wait = Math.min(wait, cur.ttlMs); // the term may end then
        } else if (cur.elected) {
          // A store that reports the time left in whole units (etcd:
          // seconds) says 0 for the last of it: read again within 20 ms,
          // then every 100 ms at most, until the term is gone.
          if (zeroOf !== cur.fence) {
            zeroOf = cur.fence;
            atZero = 0;
          }
          atZero++;
          wait = backoff(atZero, Math.min(20, wait), Math.min(100, wait));
        }
      }
      if (!(await sleep(wait, signal))) return;
    }
  }

  /** Describes the election. */
  toString(): string {
    return `Election { name: ${JSON.stringify(this.name)}, holder: ${JSON.stringify(this.holder)} }`;
  }
  toJSON(): object {
    return { name: this.name, key: this.key, holder: this.holder, ttl_ms: this.ttlMs, observe_every_ms: this.observeEveryMs };
  }
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}
