package doctor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite" // the SQLite driver

	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// checkSQLite opens path as tenure's sqlitestore.Open does (or with the
// DSN parameters given after a "?") without creating it, and checks what
// concurrent writers need.
func checkSQLite(ctx context.Context, path string, r *Report) error {
	file, params, hasParams := strings.Cut(path, "?")
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("doctor: sqlite: %w (doctor never creates a database)", err)
	}
	dsn := sqlitestore.DSN(file)
	how := "as tenure's sqlitestore.Open opens it"
	if hasParams {
		dsn = "file:" + file + "?" + params
		how = "with the given parameters"
	}
	db, err := sql.Open("sqlite", dsn+"&mode=rw")
	if err != nil {
		return fmt.Errorf("doctor: sqlite: %w", err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("doctor: sqlite %s: %w", file, err)
	}
	if strings.EqualFold(mode, "wal") {
		r.add("journal mode", OK, "WAL, "+how, "")
	} else {
		r.add("journal mode", Warn, fmt.Sprintf("%s, %s: readers block the writer and the writer blocks readers", mode, how),
			"open the file with sqlitestore.Open, or sqlitestore.DSN(path) for your own *sql.DB (journal_mode=WAL is kept by the file)")
	}
	var busy int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("doctor: sqlite %s: %w", file, err)
	}
	if busy <= 0 {
		r.add("busy timeout", Unsafe, "0, "+how+": a writer that finds the file locked fails at once with SQLITE_BUSY instead of waiting",
			"open the database with sqlitestore.DSN(path) (busy_timeout=5000) or add _pragma=busy_timeout(5000) to your DSN")
	} else {
		r.add("busy timeout", OK, fmt.Sprintf("%d ms, %s", busy, how), "")
	}
	var syncMode int
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
		return fmt.Errorf("doctor: sqlite %s: %w", file, err)
	}
	switch {
	case syncMode == 0:
		r.add("synchronous", Unsafe, "OFF: a power loss can lose committed transactions (fence admissions, completed slots)",
			"use synchronous=NORMAL with WAL (sqlitestore.DSN) or FULL")
	case syncMode == 1 && !strings.EqualFold(mode, "wal"):
		r.add("synchronous", Warn, "NORMAL without WAL: a power loss can corrupt recent transactions", "use WAL (sqlitestore.DSN)")
	default:
		r.add("synchronous", OK, []string{"OFF", "NORMAL", "FULL", "EXTRA"}[min(syncMode, 3)], "")
	}
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'tenure\_%' ESCAPE '\'`).Scan(&tables); err != nil {
		return fmt.Errorf("doctor: sqlite %s: %w", file, err)
	}
	if tables == 0 {
		r.add("schema", Warn, "no tenure tables (prefix tenure_) in the file", "run `tenure migrate up --store sqlite:FILE`, open the store once (sqlitestore.Open), or point --store at the file your service uses")
	} else {
		var version sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT max(version) FROM tenure_migrations`).Scan(&version); err != nil {
			version = sql.NullInt64{} // no version table: tables from before versions were recorded
		}
		r.add(schemaVersion(fmt.Sprintf("%d tenure tables", tables), int(version.Int64), sqlitestore.SchemaVersion, "sqlite:FILE"))
	}
	return nil
}

// checkRedis asks every node of a Redis or Redis Cluster deployment.
func checkRedis(ctx context.Context, url string, o Options, r *Report) error {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("doctor: redis: the URL does not parse")
	}
	opt.DisableCache = true
	opt.DisableRetry = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return fmt.Errorf("doctor: redis %s: %w", r.Target, err)
	}
	defer c.Close()
	nodes := c.Nodes()
	for addr, n := range nodes {
		prefix := ""
		if len(nodes) > 1 {
			prefix = addr + ": "
		}
		if err := checkRedisNode(ctx, n, prefix, o, r); err != nil {
			return fmt.Errorf("doctor: redis %s: %w", addr, err)
		}
	}
	return nil
}

func checkRedisNode(ctx context.Context, c rueidis.Client, prefix string, o Options, r *Report) error {
	info, err := c.Do(ctx, c.B().Info().Section("server").Section("memory").Section("persistence").Section("cluster").Section("replication").Build()).ToString()
	if err != nil {
		return err
	}
	info = strings.TrimPrefix(info, "txt:") // a RESP3 verbatim string
	field := func(name string) string {
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return v
			}
		}
		return ""
	}
	r.add(prefix+"version", Info, "Redis "+field("redis_version"), "")

	policy := field("maxmemory_policy")
	switch {
	case policy == "noeviction":
		r.add(prefix+"maxmemory-policy", OK, "noeviction: a full server refuses writes (tenure reports them as errors) instead of dropping keys", "")
	case policy == "":
		r.add(prefix+"maxmemory-policy", Warn, "the server does not report it", "check that the server runs with maxmemory-policy noeviction")
	default:
		r.add(prefix+"maxmemory-policy", Unsafe, policy+": the server may evict lock, fence and guarded keys like cache entries, so two holders can hold one key and fences can go back",
			"CONFIG SET maxmemory-policy noeviction (and set it in redis.conf), or give tenure a server of its own")
	}

	aof := field("aof_enabled") == "1"
	save, err := configGet(ctx, c, "save")
	if err != nil {
		return err
	}
	rdb := strings.TrimSpace(save) != ""
	switch {
	case aof:
		fsync, err := configGet(ctx, c, "appendfsync")
		if err != nil {
			return err
		}
		switch fsync {
		case "always":
			r.add(prefix+"persistence", OK, "AOF with appendfsync always: every acknowledged write survives a crash", "")
		case "everysec":
			r.add(prefix+"persistence", Warn, "AOF with appendfsync everysec: a crash can lose the last second of writes (leases granted in it are forgotten; fences stay increasing, floored at the server's clock)",
				"CONFIG SET appendfsync always if a lease granted just before a crash must not be granted again")
		default:
			r.add(prefix+"persistence", Warn, "AOF with appendfsync "+fsync+": the OS decides when writes reach disk, so a crash can lose many seconds of leases and records",
				"CONFIG SET appendfsync always (or everysec)")
		}
	default:
		detail := "no AOF: a restart loses every lease, idempotency record, session and limit state since the last snapshot (fences stay increasing: they are floored at the server's clock)"
		if !rdb {
			detail = "no persistence: a restart loses every lease, idempotency record, session and limit state (fences stay increasing: they are floored at the server's clock)"
		}
		r.add(prefix+"persistence", Warn, detail,
			"CONFIG SET appendonly yes and appendfsync always (and in redis.conf) if state must survive a restart")
	}

	delex, err := c.Do(ctx, c.B().Arbitrary("COMMAND", "INFO", "DELEX").Build()).ToArray()
	if err != nil {
		return err
	}
	if len(delex) > 0 && !delex[0].IsNil() {
		r.add(prefix+"release path", Info, "DELEX key IFEQ token: a release compares and deletes in one command", "")
	} else {
		r.add(prefix+"release path", Info, "no DELEX (it needs Redis 8.4+): releases run a compare-and-delete script, equally safe", "")
	}

	if err := checkReplication(ctx, c, prefix, info, field, aof, r); err != nil {
		return err
	}

	if field("cluster_enabled") == "1" {
		ci, err := c.Do(ctx, c.B().ClusterInfo().Build()).ToString()
		if err != nil {
			return err
		}
		ci = strings.TrimPrefix(ci, "txt:")
		state := ""
		for line := range strings.SplitSeq(ci, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
				state = v
			}
		}
		if state == "ok" {
			r.add(prefix+"cluster state", OK, "ok: every hash slot is served", "")
		} else {
			r.add(prefix+"cluster state", Unsafe, "cluster_state:"+state+": some hash slots are not served, so keys there cannot be locked or released",
				"repair the cluster (redis-cli --cluster check / fix) until CLUSTER INFO says cluster_state:ok")
		}
	}

	sent := time.Now()
	t, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		return err
	}
	received := time.Now()
	if len(t) == 2 {
		sec, _ := strconv.ParseInt(t[0], 10, 64)
		usec, _ := strconv.ParseInt(t[1], 10, 64)
		clockFinding(r, sent, received, time.Unix(sec, usec*1000), o.MaxClockOffset)
	}
	return nil
}

// checkReplication reports a node's replicas and whether redisstore, with
// its default options, confirms writes there: it waits for every replica
// the primary lists as online (WAIT N, or WAITAOF 1 N where the server has
// WAITAOF and runs with appendonly yes) and, with none online, for none.
func checkReplication(ctx context.Context, c rueidis.Client, prefix, info string, field func(string) string, aof bool, r *Report) error {
	if field("role") == "slave" {
		r.add(prefix+"replication", Info, fmt.Sprintf("a replica of %s:%s (link %s): tenure writes go to its primary; point --store at the primary to check what confirms them",
			field("master_host"), field("master_port"), field("master_link_status")), "")
		return nil
	}
	online := 0
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "ip=") && strings.Contains(line, "state=online") {
			online++
		}
	}
	connected, _ := strconv.Atoi(field("connected_slaves"))
	waitaof, err := c.Do(ctx, c.B().Arbitrary("COMMAND", "INFO", "WAITAOF").Build()).ToArray()
	if err != nil {
		return err
	}
	hasWaitAOF := len(waitaof) > 0 && !waitaof[0].IsNil()
	command := fmt.Sprintf("WAIT %d", online)
	how := "the replicas received the write"
	if hasWaitAOF && aof {
		command = fmt.Sprintf("WAITAOF 1 %d", online)
		how = "the write is in this server's append-only file and in that of the replicas (a replica without appendonly yes never confirms it)"
	}
	syncing := ""
	if connected > online {
		syncing = fmt.Sprintf("; %d more still syncing, not waited for until online", connected-online)
	}
	switch {
	case online == 0 && connected == 0:
		r.add(prefix+"replicas", Info, "none connected: redisstore confirms no write here (there is no copy to wait for), so a failover to a server that was not replicating from this one loses what it wrote; a replica that connects is waited for from about a second later", "")
	case online == 0:
		r.add(prefix+"replicas", Warn, fmt.Sprintf("%d connected, none online yet (still syncing): until one is, redisstore confirms no write here", connected),
			"wait for the initial sync to finish (INFO replication shows state=online), or set redisstore.Options.Replication.Replicas to make writes fail until then")
	default:
		r.add(prefix+"replicas", OK, fmt.Sprintf("%d online%s: with its default options redisstore sends %s with each write that a guarantee rests on and reports it done only once confirmed (%s) within 1s; a failover to one of these replicas keeps it", online, syncing, command, how), "")
	}
	if hasWaitAOF {
		r.add(prefix+"WAITAOF", Info, "available: with appendonly yes redisstore confirms with WAITAOF (with appendfsync everysec it waits for the next fsync, up to about a second); Replication.Command = ConfirmWait confirms with WAIT only", "")
	} else {
		r.add(prefix+"WAITAOF", Info, "not available (it needs Redis 7.2+): redisstore confirms with WAIT, which says the replicas received a write, not that it reached a disk", "")
	}
	minRep, err := configGet(ctx, c, "min-replicas-to-write")
	switch {
	case err != nil || minRep == "":
		r.add(prefix+"min-replicas-to-write", Info, "not readable (CONFIG GET refused)", "")
	case minRep != "0":
		r.add(prefix+"min-replicas-to-write", OK, minRep+": this server refuses writes while fewer replicas are in sync, which redisstore reports as unavailable", "")
	case online > 0:
		r.add(prefix+"min-replicas-to-write", Warn, "0: if every replica drops off, this server goes on accepting writes and redisstore, which then has no replica to wait for, reports them done; a failover after that loses them",
			"CONFIG SET min-replicas-to-write 1 and min-replicas-max-lag 10 (and in redis.conf), or set redisstore.Options.Replication.Replicas = 1, so that a primary cut off from its replicas refuses writes instead")
	default:
		r.add(prefix+"min-replicas-to-write", Info, "0: this server accepts writes without replicas", "")
	}
	return nil
}

func configGet(ctx context.Context, c rueidis.Client, name string) (string, error) {
	kv, err := c.Do(ctx, c.B().ConfigGet().Parameter(name).Build()).AsStrMap()
	if err != nil {
		return "", err
	}
	return kv[name], nil
}

// checkPostgres asks the server what durability and clock tenure gets.
func checkPostgres(ctx context.Context, url string, o Options, r *Report) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return errors.New("doctor: postgres: the URL does not parse")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
	}
	defer conn.Close(ctx)
	var version, versionNum, tz, syncCommit, fsync string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num'),
		current_setting('TimeZone'), current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&version, &versionNum, &tz, &syncCommit, &fsync); err != nil {
		return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
	}
	if n, _ := strconv.Atoi(versionNum); n < 130000 {
		r.add("version", Warn, "PostgreSQL "+version+": tenure is tested on 13 and later", "upgrade to a supported PostgreSQL release")
	} else {
		r.add("version", OK, "PostgreSQL "+version, "")
	}
	r.add("time zone", Info, tz+": tenure stores timestamptz and judges expiry with clock_timestamp(), so the zone changes nothing it decides", "")
	switch syncCommit {
	case "off":
		r.add("synchronous_commit", Unsafe, "off: a crash can lose commits already acknowledged, so a fence admission, an idempotency record or a completed slot can vanish after the caller was told it happened",
			"ALTER SYSTEM SET synchronous_commit = on (or set it for tenure's role: ALTER ROLE … SET synchronous_commit = on)")
	case "local":
		r.add("synchronous_commit", Warn, "local: a failover to a replica can lose acknowledged commits", "set synchronous_commit to on or remote_apply if you fail over to replicas")
	default:
		r.add("synchronous_commit", OK, syncCommit, "")
	}
	if fsync == "off" {
		r.add("fsync", Unsafe, "off: a crash can corrupt the database", "ALTER SYSTEM SET fsync = on")
	}
	if err := checkStandbys(ctx, conn, syncCommit, o, r); err != nil {
		return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
	}
	var tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1`, o.Schema).Scan(&tables); err != nil {
		return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
	}
	if tables == 0 {
		r.add("schema", Warn, fmt.Sprintf("no tables in schema %q", o.Schema), "run the store's Migrate once (it is idempotent), or point --schema at the schema your service uses")
	} else {
		var version *int32
		var has bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass(format('%I.tenure_migrations', $1::text)) IS NOT NULL`, o.Schema).Scan(&has); err != nil {
			return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
		}
		if has {
			if err := conn.QueryRow(ctx, `SELECT max(version) FROM `+pgx.Identifier{o.Schema}.Sanitize()+`.tenure_migrations`).Scan(&version); err != nil {
				return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
			}
		}
		v := 0
		if version != nil {
			v = int(*version)
		}
		r.add(schemaVersion(fmt.Sprintf("%d tables in schema %q", tables, o.Schema), v, pgstore.SchemaVersion, "postgres://…"))
	}
	sent := time.Now()
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return fmt.Errorf("doctor: postgres %s: %w", r.Target, err)
	}
	clockFinding(r, sent, time.Now(), now, o.MaxClockOffset)
	return nil
}

// checkStandbys reports the server's streaming standbys and whether a
// commit waits for them: tenure's writes (leases, sessions, fence
// admissions, idempotency records, completed slots) are acknowledged when
// they commit, so a failover to a standby keeps them only if commits wait
// for that standby (synchronous_standby_names names it and
// synchronous_commit is on, remote_write or remote_apply).
func checkStandbys(ctx context.Context, conn *pgx.Conn, syncCommit string, o Options, r *Report) error {
	var recovery bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovery); err != nil {
		return err
	}
	if recovery {
		r.add("standbys", Info, "this server is a standby (in recovery): tenure writes to the primary; point --store at the primary to check what its commits wait for", "")
		return nil
	}
	var streaming, covered, hidden int
	var names string
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'streaming'),
		count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
		count(*) FILTER (WHERE state IS NULL),
		current_setting('synchronous_standby_names')
		FROM pg_stat_replication`).Scan(&streaming, &covered, &hidden, &names); err != nil {
		return err
	}
	waits := syncCommit == "on" || syncCommit == "remote_write" || syncCommit == "remote_apply"
	switch {
	case hidden > 0 && streaming == 0:
		r.add("standbys", Info, fmt.Sprintf("%d replication connections whose state this role may not see (it needs pg_monitor or pg_read_all_stats)", hidden), "")
	case streaming == 0:
		r.add("standbys", Info, "no streaming standby: a commit lives on this server alone; a failover to a server that was not streaming from it loses tenure's state", "")
	case covered < streaming:
		detail := fmt.Sprintf("%d of %d streaming standbys are asynchronous (synchronous_standby_names %q): a commit does not wait for them, so a failover to one loses what it had not received yet — leases (a second holder), revoked sessions (back again), fence admissions, idempotency records and completed slots",
			streaming-covered, streaming, names)
		r.add("standbys", Warn, detail,
			"name every standby you fail over to in synchronous_standby_names (e.g. ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (s1, s2)'; SELECT pg_reload_conf()) with synchronous_commit on or remote_apply, or fail over only to synchronous standbys")
	case !waits:
		r.add("standbys", Warn, fmt.Sprintf("%d synchronous standbys, but synchronous_commit is %s: commits do not wait for them, so a failover can lose acknowledged commits", streaming, syncCommit),
			"set synchronous_commit to on or remote_apply (for tenure's role at least: ALTER ROLE … SET synchronous_commit = on)")
	default:
		r.add("standbys", OK, fmt.Sprintf("%d streaming standbys, all synchronous (synchronous_standby_names %q, synchronous_commit %s): a commit is acknowledged once a standby has it, so a failover to one keeps it", streaming, names, syncCommit), "")
	}
	var unlogged bool
	if err := conn.QueryRow(ctx, `SELECT coalesce((SELECT relpersistence = 'u' FROM pg_class WHERE oid = to_regclass(format('%I.leases', $1::text))), false)`, o.Schema).Scan(&unlogged); err != nil {
		return err
	}
	if unlogged {
		st, detail := Info, "UNLOGGED (pgstore.Options.UnloggedLeases): leases skip the write-ahead log; a crash empties the table"
		if streaming > 0 {
			st, detail = Warn, "UNLOGGED (pgstore.Options.UnloggedLeases): leases are not replicated, so after a failover every lease is free (fences stay above every earlier one and the guards' table is logged, so a guard still refuses the holders from before)"
		}
		r.add("leases table", st, detail, map[bool]string{true: "keep leases logged (the default) where a failover must not free them", false: ""}[st == Warn])
	}
	return nil
}

// checkEtcd asks etcd for its health and the shortest lease it grants.
func checkEtcd(ctx context.Context, endpoints []string, r *Report) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Context: ctx})
	if err != nil {
		return fmt.Errorf("doctor: etcd: %w", err)
	}
	defer c.Close()
	var leader uint64
	for _, ep := range endpoints {
		ep = strings.TrimPrefix(ep, "http://")
		st, err := c.Status(ctx, ep)
		if err != nil {
			r.add(ep+": status", Unsafe, "does not answer: "+err.Error(), "bring the member back or remove it from the cluster")
			continue
		}
		r.add(ep+": version", Info, "etcd "+st.Version, "")
		if len(st.Errors) > 0 {
			r.add(ep+": alarms", Unsafe, strings.Join(st.Errors, "; "), "clear the alarm (etcdctl alarm list / disarm) after fixing its cause, e.g. free space and defragment")
		}
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if leader == 0 {
		r.add("leader", Unsafe, "no member knows a leader: writes (acquires, renewals) cannot commit", "restore a quorum of members")
		return nil
	}
	r.add("leader", OK, fmt.Sprintf("member %x", leader), "")
	g, err := c.Grant(ctx, 1)
	if err != nil {
		return fmt.Errorf("doctor: etcd: grant a test lease: %w", err)
	}
	c.Revoke(context.WithoutCancel(ctx), g.ID)
	if g.TTL > 1 {
		r.add("minimum lease TTL", Info, fmt.Sprintf("%ds: etcd raises shorter TTLs to this; tenure's leases report the TTL really granted, and short TTLs last this long", g.TTL), "")
	} else {
		r.add("minimum lease TTL", OK, "1s", "")
	}
	return nil
}

// schemaVersion is the schema check's verdict: the recorded version against
// the one this tenure needs.
func schemaVersion(tables string, current, latest int, store string) (string, Status, string, string) {
	switch {
	case current == latest:
		return "schema", OK, fmt.Sprintf("%s, version %d", tables, current), ""
	case current > latest:
		return "schema", Unsafe, fmt.Sprintf("%s at version %d, newer than version %d this tenure knows", tables, current, latest),
			"upgrade tenure: services built with this version refuse the schema"
	default:
		return "schema", Warn, fmt.Sprintf("%s at version %d, this tenure needs version %d", tables, current, latest),
			"run `tenure migrate up --store " + store + "` (or apply `tenure migrate sql` with your own tool); services refuse the schema until then"
	}
}
