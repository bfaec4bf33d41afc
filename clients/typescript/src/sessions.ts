import { formatDuration, type Duration } from "./duration.js";
import type { components } from "./schema.js";
import { fromBase64, toBase64, type Transport } from "./transport.js";

type W = components["schemas"];

/** Names a session: by its token, or by its store ID. */
export type SessionRef = { token: string; id?: never } | { id: string; token?: never };

/** A session as the server's store keeps it. */
export interface SessionRecord {
  /** The store ID. */
  id: string;
  userId: string;
  /** The session's data (the values of a session the server made the token of, as JSON). */
  data: Uint8Array;
  /** 1 at creation, one more with every save. */
  version: number;
  created: Date;
  idleUntil: Date;
  absoluteUntil: Date;
  /** create without id: the new session token, given once. Keep it secret. */
  token?: string;
}

/** Options of {@link Sessions.create}. */
export type CreateSession =
  | { userId: string; idle: Duration; absolute: Duration; values?: Record<string, string>; id?: never; data?: never }
  | { userId: string; idle: Duration; absolute: Duration; id: string; data?: string | Uint8Array; values?: never };

function record(r: W["SessionRecord"]): SessionRecord {
  const out: SessionRecord = {
    id: r.id,
    userId: r.user_id,
    data: fromBase64(r.data),
    version: r.version,
    created: new Date(r.created),
    idleUntil: new Date(r.idle_until),
    absoluteUntil: new Date(r.absolute_until),
  };
  if (r.token) out.token = r.token;
  return out;
}

function ref(r: SessionRef): Pick<W["SessionRef"], "id" | "token"> {
  return r.token !== undefined ? { token: r.token } : { id: r.id };
}

/** The session operations of a {@link Client} (`client.sessions`). Session tokens travel only in request bodies. */
export class Sessions {
  readonly #t: Transport;

  /** @internal */
  constructor(t: Transport) {
    this.#t = t;
  }

  /**
   * Creates a session: with `values`, the server makes the token (returned
   * once, in `token`); with `id` (the store ID of a token the caller made),
   * the record is stored under it with opaque `data`. A session lives until
   * `idle` passes without a touch, or `absolute` after its creation.
   */
  async create(s: CreateSession, signal?: AbortSignal): Promise<SessionRecord> {
    const body: W["SessionCreate"] = { user_id: s.userId, idle: formatDuration(s.idle), absolute: formatDuration(s.absolute) };
    if (s.id !== undefined) {
      body.id = s.id;
      if (s.data !== undefined) body.data = toBase64(s.data);
    } else if (s.values !== undefined) {
      body.values = s.values;
    }
    return record(await this.#t.call<W["SessionRecord"]>("POST", "/v1/sessions", { body, signal }));
  }

  /** Loads a live session, refreshing its idle deadline when `idle` is given; an ended one fails with a NotFoundError. */
  async load(r: SessionRef, o: { idle?: Duration; signal?: AbortSignal } = {}): Promise<SessionRecord> {
    const body: W["SessionRef"] = ref(r);
    if (o.idle !== undefined) body.idle = formatDuration(o.idle);
    return record(await this.#t.call<W["SessionRecord"]>("POST", "/v1/sessions/load", { body, signal: o.signal }));
  }

  /** Refreshes the idle deadline of a session at version; returns the new deadline (ConflictError: the version moved on). */
  async touch(r: SessionRef, version: number, idle: Duration, signal?: AbortSignal): Promise<Date> {
    const body: W["SessionRef"] = { ...ref(r), version, idle: formatDuration(idle) };
    const out = await this.#t.call<W["SessionTouched"]>("POST", "/v1/sessions/touch", { body, signal });
    return new Date(out.idle_until);
  }

  /** Replaces a session's data if it is at version (compare-and-set; ConflictError otherwise). */
  async save(r: SessionRef, version: number, data: string | Uint8Array, idle: Duration, signal?: AbortSignal): Promise<SessionRecord> {
    const body: W["SessionRef"] = { ...ref(r), version, data: toBase64(data), idle: formatDuration(idle) };
    return record(await this.#t.call<W["SessionRecord"]>("POST", "/v1/sessions/save", { body, signal }));
  }

  /** Moves a session at version to newId (same user and absolute deadline). */
  async rotate(r: SessionRef, newId: string, version: number, idle: Duration, signal?: AbortSignal): Promise<SessionRecord> {
    const body: W["SessionRef"] = { ...ref(r), new_id: newId, version, idle: formatDuration(idle) };
    return record(await this.#t.call<W["SessionRecord"]>("POST", "/v1/sessions/rotate", { body, signal }));
  }

  /** Ends a session (a logout). A session that had already ended fails with a NotFoundError. */
  async revoke(r: SessionRef, signal?: AbortSignal): Promise<void> {
    await this.#t.call("POST", "/v1/sessions/revoke", { body: ref(r) satisfies W["SessionRef"], signal });
  }

  /** Ends every session of a user in one atomic step ("log out everywhere"); returns how many live sessions it removed. */
  async revokeUser(userId: string, signal?: AbortSignal): Promise<number> {
    const out = await this.#t.call<W["Revoked"]>("POST", "/v1/sessions/revoke-user", { body: { user_id: userId } satisfies W["UserRef"], signal });
    return out.removed;
  }

  /** A user's live sessions, oldest first. */
  async list(userId: string, signal?: AbortSignal): Promise<SessionRecord[]> {
    const out = await this.#t.call<W["SessionList"]>("GET", "/v1/sessions", { query: { user_id: userId }, signal });
    return out.sessions.map(record);
  }

  /**
   * Sets a value of the session's user (a balance, a role) only if the
   * session is live and, with version, still at it when the write lands:
   * the server checks the session in the same atomic step, so a write after
   * a logout changes nothing (NotFoundError; ConflictError for another
   * version).
   */
  async write(r: SessionRef, name: string, value: string | Uint8Array, o: { version?: number; signal?: AbortSignal } = {}): Promise<void> {
    const body: W["SessionValueWrite"] = { ...ref(r), name, value_base64: toBase64(value) };
    if (o.version !== undefined) body.version = o.version;
    await this.#t.call("POST", "/v1/sessions/write", { body, signal: o.signal });
  }

  /** A value that write keeps: null if it was never written. */
  async read(userId: string, name: string, signal?: AbortSignal): Promise<Uint8Array | null> {
    const v = await this.#t.call<W["SessionValue"]>("GET", "/v1/sessions/value", { query: { user_id: userId, name }, signal });
    return v.present ? fromBase64(v.value_base64) : null;
  }
}
