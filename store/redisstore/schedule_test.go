package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/store/redisstore"
)

// schedTarget is the suite's target on a Redis (or Cluster) client: the
// business counter is a slot value added to in the fenced completion; other
// nodes get clients of their own.
func schedTarget(t *testing.T, newClient func(t *testing.T) rueidis.Client) scheduletest.Target {
	return schedTargetOn(t, func(t *testing.T, o *redisstore.Options) *redisstore.Store {
		return newRedis(t, newClient(t), o)
	}, newClient)
}

// schedTargetOn is schedTarget on stores made by open, each on a client of
// its own.
func schedTargetOn(t *testing.T, open func(t *testing.T, o *redisstore.Options) *redisstore.Store, raw func(t *testing.T) rueidis.Client) scheduletest.Target {
	prefix := "sched:" + uniq(t, "") + ":"
	o := &redisstore.Options{Prefix: prefix}
	s := open(t, o)
	if err := s.Check(ctxT(t)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return scheduletest.Target{
		Store: s.Schedules(),
		Node:  func(t *testing.T) schedule.Store { return open(t, o).Schedules() },
		Complete: func(ctx context.Context, slot *schedule.Slot) error {
			return s.CompleteSlot(ctx, slot, redisstore.AddSlotValue("count", 1))
		},
		Count: func(ctx context.Context, job string) (int64, error) {
			b, err := s.SlotValue(ctx, job, "count")
			if err != nil || b == nil {
				return 0, err
			}
			return strconv.ParseInt(string(b), 10, 64)
		},
		Retained: &scheduletest.Retained{
			Reclaim: func(t *testing.T, ret time.Duration) {
				if _, err := retention.SweepAll(ctxT(t), s, retention.Options{ScheduleRetention: ret}, 0); err != nil {
					t.Fatalf("Sweep: %v", err)
				}
			},
			Stored: func(t *testing.T, job string) scheduletest.Stored { return schedStored(t, raw(t), s, job) },
		},
	}
}

// schedStored reads what s keeps of job's slots: the slot IDs of its
// slots zset, its ledger hash, and the records with an attempt history.
func schedStored(t *testing.T, c rueidis.Client, s *redisstore.Store, job string) scheduletest.Stored {
	ctx := ctxT(t)
	tag := s.SchedTag(job)
	slots, err := c.Do(ctx, c.B().Zrange().Key(tag+"slots").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := c.Do(ctx, c.B().Hkeys().Key(tag+"ledger").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	st := scheduletest.Stored{Slots: []string{}, Ledger: ledger, Attempts: []string{}}
	for _, id := range slots {
		n, err := c.Do(ctx, c.B().Exists().Key(tag+"rec:"+id).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			continue
		}
		st.Slots = append(st.Slots, id)
		h, err := c.Do(ctx, c.B().Hexists().Key(tag+"rec:"+id).Field("h").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if h == 1 {
			st.Attempts = append(st.Attempts, id)
		}
	}
	slices.Sort(st.Slots)
	slices.Sort(st.Ledger)
	slices.Sort(st.Attempts)
	return st
}
