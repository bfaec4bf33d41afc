package main

import "github.com/tenurekit/tenure/cmd/tenure/internal/clienttest"

// The store clients and stores of the tests (package clienttest).
var (
	newEtcd     = clienttest.NewEtcd
	newPG       = clienttest.NewPG
	newRedis    = clienttest.NewRedis
	pgxPool     = clienttest.PGXPool
	redisClient = clienttest.RedisClient
	etcdClient  = clienttest.EtcdClient
)
