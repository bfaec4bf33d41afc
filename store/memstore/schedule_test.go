package memstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/store/memstore"
)

// scheduleTarget is the suite's target on a memstore: the business
// counter is a slot value added to in the fenced completion.
func scheduleTarget(ms *memstore.Store, clock *scheduletest.Clock) scheduletest.Target {
	return scheduletest.Target{
		Store: ms.Schedules(),
		Complete: func(ctx context.Context, slot *schedule.Slot) error {
			return ms.CompleteSlot(ctx, slot, memstore.AddSlotValue("count", 1))
		},
		Count: func(ctx context.Context, job string) (int64, error) {
			b, err := ms.SlotValue(ctx, job, "count")
			if err != nil || len(b) == 0 {
				return 0, err
			}
			return strconv.ParseInt(string(b), 10, 64)
		},
		Clock: clock,
	}
}

// TestScheduleConformance runs the suite twice: on a fake clock (every
// case, the misfire, overlap and DST ones included) and on the real clock.
func TestScheduleConformance(t *testing.T) {
	scheduletest.RunClocks(t, func(t *testing.T, clock *scheduletest.Clock) scheduletest.Target {
		if clock == nil {
			return scheduleTarget(newMem(t, nil), nil)
		}
		return scheduleTarget(newMem(t, &memstore.Options{Clock: clock.Now}), clock)
	})
}
