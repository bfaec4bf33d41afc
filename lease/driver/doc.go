// Package driver is for store writers; applications use package lease.
//
// It holds the contract between package lease and the stores that keep
// leases (memstore, sqlitestore, pgstore, redisstore, etcdstore, or one of
// your own): the Store interface and the values that cross it (Grant, Info,
// HeldError), the optional interfaces a store may implement (HolderAcquirer,
// Lister; for contended keys Queuer, Waker and Handover, with the
// wake-ups' format: WaiterID, GrantWake, ParseWake), the checks every store runs before its first write (Validate,
// ValidateKey, ValidateToken, ValidateTTL, ValidateHolder, ValidateList),
// and the rule stores share for fences (NextFence).
//
// The types an application also sees (Store, Grant, Info, HeldError,
// Lister) and the limits and sentinel errors are defined here and
// re-exported by package lease under the same names, so a value of either
// is a value of the other, and errors.Is(err, lease.ErrInvalid) holds for
// an error wrapping ErrInvalid.
package driver
