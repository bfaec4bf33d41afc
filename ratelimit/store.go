package ratelimit

import "github.com/tenurekit/tenure/ratelimit/driver"

// Store is where limits keep their state: memstore, sqlitestore, pgstore
// and redisstore return one from their Limits method. It is package
// driver's Store, whose documentation is the contract a store implements;
// applications only pass it to New and NewConcurrency.
type Store = driver.Store
