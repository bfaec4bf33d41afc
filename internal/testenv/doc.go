// Package testenv starts real, throwaway servers for tests: Redis (single
// instances and a three-master cluster), PostgreSQL and etcd (single members
// and multi-member clusters), all from the binaries installed on the machine,
// plus a TCP proxy for injecting network faults in front of any of them.
//
// # Servers
//
// Every server runs as a child process of the test binary, listens only on
// 127.0.0.1 on a free port, keeps its data and its log file in a temporary
// directory of its own and is placed in its own process group. Each child is
// started with a parent-death signal of SIGKILL, so servers never outlive the
// test process, even when it crashes or is killed.
//
// Constructors such as [Redis], [Postgres], [Etcd] and [EtcdCluster] start a
// fresh server that belongs to one test and is stopped, and its directory
// removed, in that test's cleanup. The Shared* variants ([SharedRedis],
// [SharedRedisCluster], [SharedPostgres], [SharedEtcd]) start one server per
// test process on first use and keep it for every later test; tests that use
// them must pick unique keys (or, for PostgreSQL, a database of their own via
// [PostgresServer.NewDatabase]) and must not stop, restart or pause them.
// Shared servers are stopped by [Main], which a package's TestMain should
// call:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Startup is awaited by polling the server (a PING for Redis, a connection
// for PostgreSQL, /health and a read for etcd) for up to 30 seconds. When a
// server fails to start, or when the test that uses it fails, the tail of the
// server's log is written to the test log.
//
// # Missing binaries
//
// Servers are looked up on PATH (and PostgreSQL also in
// /usr/lib/postgresql/*/bin). When a binary is missing the test is skipped
// with a message that says how to install it, unless the environment variable
// TENURE_TEST_REQUIRE is set to 1, in which case the test fails instead. CI
// sets it so that a missing server can never silently skip a suite. See
// [RequireBinary].
//
// # PostgreSQL and root
//
// initdb and postgres refuse to run as root. When the tests run as root,
// PostgreSQL is started as the "postgres" system user, in a temporary
// directory owned by that user.
//
// # Fault injection
//
// [NewProxy] puts a real TCP proxy in front of an address. [Proxy.Cut] makes
// the server unreachable, [Proxy.DropReplies] lets requests through but
// swallows every reply, [Proxy.Heal] restores normal forwarding, and
// [Proxy.SetUpstream] switches it to another server, as a failover would.
// Single members can also be frozen with SIGSTOP through the Pause and
// PauseMember methods.
//
// Servers can also fail harder: [RedisServer.Kill] ends a Redis server with
// SIGKILL, and [RedisReplica] starts a replica of a server that
// [RedisServer.Promote] turns into a primary; [PostgresServer.StopImmediate]
// stops PostgreSQL without a checkpoint (`pg_ctl stop -m immediate`), and
// [PostgresWith] with [PostgresOptions.Durable] starts a server that syncs
// every commit, so that nothing acknowledged is lost across it.
package testenv
