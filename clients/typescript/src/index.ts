/**
 * The TypeScript client of tenure serve: leases with fencing tokens and
 * keep-alive, holder-checked and fenced writes, leader election,
 * idempotency, rate limits and sessions over tenure's HTTP API.
 */
export { Client, type FencedValue, type LeaseRef, type Options } from "./client.js";
export type { ClientOptions } from "./transport.js";
export { formatDuration, parseDuration, type Duration } from "./duration.js";
export {
  ConflictError,
  ForbiddenError,
  HeldError,
  InProgressError,
  InternalError,
  InvalidError,
  LeaseLostError,
  LeaseReleasedError,
  LostError,
  MismatchError,
  NotFoundError,
  NotHeldError,
  NotSupportedError,
  ProblemType,
  RateLimitedError,
  StaleError,
  TenureError,
  TooLargeError,
  TransportError,
  UnauthorizedError,
  UnavailableError,
  type Problem,
} from "./errors.js";
export {
  DEFAULT_ELECTION_TTL_MS,
  DEFAULT_OBSERVE_EVERY_MS,
  ELECTION_KEY_PREFIX,
  Election,
  Term,
  type ElectionOptions,
  type Leader,
  type ObserveOptions,
} from "./election.js";
export { Lease, Leases, type AcquireOptions, type LeaseInfo, type MarginOptions } from "./lease.js";
export {
  ClaimLostError,
  FinalError,
  Idempotency,
  UnknownOutcomeError,
  type Claim,
  type IdempotencyRequest,
  type IdempotentResult,
  type RunOptions,
} from "./idempotency.js";
export { Limits, type Algorithm, type Limit, type RateDecision, type RateDecisions, type RateRequest, type StateKey } from "./limits.js";
export { Sessions, type CreateSession, type SessionRecord, type SessionRef } from "./sessions.js";
export type { components, operations, paths } from "./schema.js";
