// Package tenure holds what every primitive of the toolkit shares: the
// kinds of error (ErrInvalid, ErrUnavailable, ErrNotFound, ErrConflict,
// ErrLost, ErrStale) that each primitive's own sentinels match with
// errors.Is.
//
// The primitives are packages of their own: lease (locks with fencing
// tokens), fence (admitting writes by fence), idempotency, ratelimit,
// session and schedule, each with a store contract that the stores under
// store/ implement (memstore here; sqlitestore, pgstore, redisstore and
// etcdstore in modules of their own).
package tenure
