import { parseDuration } from "./duration.js";
import type { components } from "./schema.js";

/** A problem body (RFC 9457) as tenure serve answers it. */
export type Problem = components["schemas"]["Problem"];

/** The problem type URIs, one per tenure error. */
export const ProblemType = {
  held: "urn:tenure:problem:held",
  notHeld: "urn:tenure:problem:not_held",
  lost: "urn:tenure:problem:lost",
  stale: "urn:tenure:problem:stale",
  mismatch: "urn:tenure:problem:mismatch",
  inProgress: "urn:tenure:problem:in_progress",
  conflict: "urn:tenure:problem:conflict",
  notFound: "urn:tenure:problem:not_found",
  invalid: "urn:tenure:problem:invalid",
  unavailable: "urn:tenure:problem:unavailable",
  unauthorized: "urn:tenure:problem:unauthorized",
  forbidden: "urn:tenure:problem:forbidden",
  rateLimited: "urn:tenure:problem:rate_limited",
  tooLarge: "urn:tenure:problem:too_large",
  notSupported: "urn:tenure:problem:not_supported",
  internal: "urn:tenure:problem:internal",
} as const;

/**
 * An error tenure serve answered with: `type` is the problem type URI
 * (see {@link ProblemType}), `status` the HTTP status. The message is the
 * problem's title and detail; it never carries a token.
 */
export class TenureError extends Error {
  override name = "TenureError";
  /** The problem type URI. */
  readonly type: string;
  /** The HTTP status (0 for a request that got no answer). */
  readonly status: number;
  readonly title: string;
  readonly detail: string | undefined;
  /** The problem body as answered. */
  readonly problem: Problem;

  constructor(problem: Problem, options?: { cause?: unknown }) {
    super(
      problem.detail
        ? `tenure serve: ${problem.status} ${problem.title}: ${problem.detail}`
        : `tenure serve: ${problem.status} ${problem.title}`,
      options,
    );
    this.type = problem.type;
    this.status = problem.status;
    this.title = problem.title;
    this.detail = problem.detail;
    this.problem = problem;
  }
}

/** held: another holder has the lease key. */
export class HeldError extends TenureError {
  override name = "HeldError";
  /** The holder's remaining time in ms (0 when the key is free but promised to waiters ahead). */
  readonly ttlMs: number;
  /** The holder's description, when it gave one. */
  readonly holder: string | undefined;
  /** How many waiters are queued ahead of the caller. */
  readonly position: number;
  constructor(p: Problem) {
    super(p);
    this.ttlMs = parseDuration(p.ttl);
    this.holder = p.holder;
    this.position = p.position ?? 0;
  }
}

/** not_held: the token does not hold the lease (any more). */
export class NotHeldError extends TenureError {
  override name = "NotHeldError";
}

/** lost: an idempotency claim or a permit is no longer held by its token. */
export class LostError extends TenureError {
  override name = "LostError";
}

/** stale: the fence is not above the one admitted. */
export class StaleError extends TenureError {
  override name = "StaleError";
  /** The refused fence. */
  readonly fence: number;
  /** The greatest admitted fence. */
  readonly current: number;
  constructor(p: Problem) {
    super(p);
    this.fence = p.fence ?? 0;
    this.current = p.current ?? 0;
  }
}

/** mismatch: an idempotency key reused with other input. */
export class MismatchError extends TenureError {
  override name = "MismatchError";
}

/** in_progress: an earlier request with the idempotency key holds its claim. */
export class InProgressError extends TenureError {
  override name = "InProgressError";
  /** The claim's remaining time in ms: when to try again. */
  readonly retryAfterMs: number;
  constructor(p: Problem) {
    super(p);
    this.retryAfterMs = parseDuration(p.ttl);
  }
}

/** conflict: a session's version moved on. */
export class ConflictError extends TenureError {
  override name = "ConflictError";
}

/** not_found: no live session (or no such route). */
export class NotFoundError extends TenureError {
  override name = "NotFoundError";
}

/** invalid: bad input; nothing was written. */
export class InvalidError extends TenureError {
  override name = "InvalidError";
}

/**
 * unavailable: the store did not answer, so the outcome of a write is
 * unknown. `instance` names the request in the server's log.
 */
export class UnavailableError extends TenureError {
  override name = "UnavailableError";
  readonly instance: string | undefined;
  constructor(p: Problem, options?: { cause?: unknown }) {
    super(p, options);
    this.instance = p.instance;
  }
}

/**
 * A request that got no answer from tenure serve (refused connection,
 * reset, timeout, an aborted signal) or an answer that is not the API's:
 * the outcome is unknown, as for {@link UnavailableError}. `status` is the
 * HTTP status of an answer without a problem body, else 0; `cause` is the
 * underlying error.
 */
export class TransportError extends UnavailableError {
  override name = "TransportError";
  constructor(detail: string, status: number, cause?: unknown) {
    super({ type: ProblemType.unavailable, title: "tenure serve unreachable", status, detail }, { cause });
  }
}

/** unauthorized: missing or unknown bearer token. */
export class UnauthorizedError extends TenureError {
  override name = "UnauthorizedError";
}

/** forbidden: outside the token's namespaces or operations. */
export class ForbiddenError extends TenureError {
  override name = "ForbiddenError";
}

/** rate_limited: the token is over the API's own limit. */
export class RateLimitedError extends TenureError {
  override name = "RateLimitedError";
  /** The Retry-After the server sent, in ms (0 if none). */
  retryAfterMs = 0;
}

/** too_large: the request body is larger than the server's max_body_bytes. */
export class TooLargeError extends TenureError {
  override name = "TooLargeError";
}

/** not_supported: the server's store does not keep this. */
export class NotSupportedError extends TenureError {
  override name = "NotSupportedError";
}

/** internal: an internal error of the server (see its log for `instance`). */
export class InternalError extends TenureError {
  override name = "InternalError";
}

const classes: Record<string, new (p: Problem) => TenureError> = {
  [ProblemType.held]: HeldError,
  [ProblemType.notHeld]: NotHeldError,
  [ProblemType.lost]: LostError,
  [ProblemType.stale]: StaleError,
  [ProblemType.mismatch]: MismatchError,
  [ProblemType.inProgress]: InProgressError,
  [ProblemType.conflict]: ConflictError,
  [ProblemType.notFound]: NotFoundError,
  [ProblemType.invalid]: InvalidError,
  [ProblemType.unavailable]: UnavailableError,
  [ProblemType.unauthorized]: UnauthorizedError,
  [ProblemType.forbidden]: ForbiddenError,
  [ProblemType.rateLimited]: RateLimitedError,
  [ProblemType.tooLarge]: TooLargeError,
  [ProblemType.notSupported]: NotSupportedError,
  [ProblemType.internal]: InternalError,
};

/** Returns the error of a problem: the class of its type, else a TenureError. */
export function problemError(p: Problem): TenureError {
  const C = classes[p.type];
  return C ? new C(p) : new TenureError(p);
}

/**
 * The end of a lease or an idempotency claim before its holder let it go:
 * its renewal was refused (the cause is the server's {@link NotHeldError}
 * or {@link LostError}), the server reported another fence, or its
 * validity ran out while renewals got no answer. Work done after it may
 * overlap with the next holder's; writes should pass the fence to a guard
 * (the holder-checked write refuses them).
 */
export class LeaseLostError extends Error {
  override name = "LeaseLostError";
  readonly key: string;
  readonly fence: number;
  constructor(message: string, key: string, fence: number, options?: { cause?: unknown }) {
    super(message, options);
    this.key = key;
    this.fence = fence;
  }
}

/** The reason of a lease's signal once its holder released it. */
export class LeaseReleasedError extends Error {
  override name = "LeaseReleasedError";
  readonly key: string;
  constructor(key: string) {
    super(`tenure: lease of ${JSON.stringify(key)} released`);
    this.key = key;
  }
}
