// Package schedule runs scheduled jobs across many nodes so that each
// slot's effect happens once.
//
// A job has a name, a schedule ([Cron] with a time zone, or [Every]), a
// handler, and policies for misfires (slots that were due while no node ran
// them), overlap (a slot due while the previous run still runs), timeouts
// and retries. Every node runs a [Scheduler] with the same jobs on the same
// [Store].
//
// # Slots
//
// A slot is a job's nominal fire time. Its ID is derived from the schedule
// alone, so it is the same on every node and after every restart: recovery
// re-runs the same slot, never a new one. A slot is claimed with a fenced
// lease (the store's lease view, key ClaimKey of package schedule/driver)
// renewed while the handler runs; a node that dies loses its claim after Options.ClaimTTL and another
// node takes the slot over under the same ID, with a greater fence. Whether
// a slot is due is judged on the store's clock, never a node's.
//
// # A slot's run
//
// An attempt at a slot goes through fixed steps, each ending the attempt
// with an exact record or going on: claim the slot (held elsewhere: look
// again when that claim ends); read its record (already final: drop it);
// for a catch-up slot, take a catch-up permit (key PermitKey); pass the
// overlap gate (below); record the start ([Store.Begin]); run the
// handler; release the run lease and permit, record done or failed, and
// release the claim. A step that cannot reach the store writes nothing
// and the slot is looked at again, so a slot that should run is never
// recorded skipped or failed for it.
//
// # Overlap and catch-up
//
// Under OverlapSkip and OverlapQueue a job's runs take turns on its run
// lease (key RunKey). OverlapSkip records a slot skipped only when the run
// of an earlier slot was already running at the slot's time and still
// runs; a run lease left by a dead node, by a node that found its slot
// done, or by a run that began after the slot's time is waited for.
// OverlapQueue always waits. A late slot that MisfireCatchUp runs is
// never skipped: under OverlapSkip and OverlapQueue it waits for the run
// lease, so catch-up and on-time runs take turns one at a time (oldest
// catch-up slot first on each node); under OverlapAllow catch-up runs are
// bounded by CatchUpConcurrency alone. On each node, slots of a job take
// the run lease in slot order.
//
// # Exactly-once effect
//
// A claim coordinates; it does not protect: a node paused past its claim
// wakes up believing it still runs the slot. The effect itself must carry
// the check. The SQL stores offer CompleteSlot(ctx, tx, slot), which in the
// caller's transaction checks that the slot's claim is still the current
// one (token, fence and expiry on the database clock) and inserts (job,
// slot) into a ledger; a duplicate or stale executor gets an error and its
// transaction rolls back with the business change. Redis and memory offer a
// fenced completion that applies effects they hold in the same atomic step.
//
// # Daylight saving time
//
// [Cron] fires a fixed-hour spec once per wall-clock date-time: at the first
// occurrence of a repeated local time, at the end of the gap for a skipped
// one. Wildcard-hour specs fire at every instant whose local time matches.
//
// # Audit
//
// Every slot the scheduler decides about has a [Record]: running, done,
// failed, skipped or missed, with the node, the attempts, the claim's fence
// and the times on the store's clock, and its latest attempts
// (Record.History, at most [MaxHistory]): node, fence, start, end,
// [Outcome] and error of each. Query them with [Scheduler.Slot] and
// [Scheduler.Slots].
//
// # Nodes that disagree about a job
//
// When nodes run different definitions of a job (a rolling deploy that
// changes its schedule, zone or a policy), the most recently registered
// definition wins. A Scheduler registers each job's [Job.Fingerprint] with
// the store ([Store.Register]) before it starts or records any slot of it;
// every Begin and Mark carries the fingerprint and the store refuses one
// that is not the current definition ([ErrSuperseded]) in the same atomic
// step that would record it. A refused node logs a warning and starts and
// records no slot of the job until its definition is current again;
// restart it with the current definition.
//
// # Errors
//
// [ErrInvalid] (nothing written), [ErrUnavailable], [ErrNotFound],
// [ErrFinal] (*[FinalError]), [ErrNotDue] (*[NotDueError]), [ErrCompleted]
// (a duplicate completion), [ErrSuperseded] (another job definition is the
// registered one) and [ErrStale] (fence.ErrStale: a superseded
// attempt); test them with errors.Is.
//
// # Stores
//
// Stores implement [Store]; memstore, sqlitestore, pgstore and redisstore
// return one from their Schedules method. What only store writers need
// (the Store contract's requests, the claims lease keys, the input checks,
// the reference decisions and the stored form of the attempt history) is
// in package schedule/driver, which defines Store, Record and the other
// types both sides name; package schedule re-exports them under the same
// names. The conformance suite in scheduletest checks a store.
package schedule
