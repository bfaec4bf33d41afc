package lease

import "github.com/tenurekit/tenure/lease/driver"

// MaxListLimit is the most keys one List call returns.
const MaxListLimit = driver.MaxListLimit

// Lister is implemented by stores that can list the keys they hold
// (memstore, sqlitestore, pgstore, redisstore, etcdstore). It is optional:
// a Store without it still meets the contract, and callers check for it
// with a type assertion. List returns the state of the keys that start
// with prefix and sort after after (byte order; "" starts at the first),
// in key order, at most limit of them (1 to MaxListLimit).
type Lister = driver.Lister
