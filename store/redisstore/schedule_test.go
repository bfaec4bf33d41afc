package redisstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

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
	})
}

// schedTargetOn is schedTarget on stores made by open, each on a client of
// its own.
func schedTargetOn(t *testing.T, open func(t *testing.T, o *redisstore.Options) *redisstore.Store) scheduletest.Target {
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
	}
}
