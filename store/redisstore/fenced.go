package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/obs"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// FencedSet writes value to resource if f is greater than every fence
// admitted for resource before (strict mode: one write per tenure);
// otherwise it returns a *fence.StaleError (errors.Is fence.ErrStale) and
// changes nothing. The comparison and the write are one Lua script, exact
// over the whole uint64 range. The value and the admitted fence are kept
// without expiry under prefix{resource}:value and prefix{resource}:admitted.
func (s *Store) FencedSet(ctx context.Context, resource string, f uint64, value []byte) error {
	return s.fencedSet(ctx, resource, f, value, fence.Strict)
}

// FencedSetAtLeast is FencedSet that also admits a fence equal to the
// greatest admitted one (several writes within one tenure).
func (s *Store) FencedSetAtLeast(ctx context.Context, resource string, f uint64, value []byte) error {
	return s.fencedSet(ctx, resource, f, value, fence.AtLeast)
}

func (s *Store) fencedSet(ctx context.Context, resource string, f uint64, value []byte, mode fence.Mode) error {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	m := "s"
	if mode == fence.AtLeast {
		m = "a"
	}
	vk, fk := s.valueKeys(resource)
	res, p := s.write(ctx, fencedSetScript, []string{vk, fk},
		[]string{strconv.FormatUint(f, 10), m, rueidis.BinaryString(value)}, false)
	arr, err := res.ToArray()
	if err != nil {
		return s.fail(err)
	}
	if len(arr) != 2 {
		return malformed("fenced set")
	}
	ok, err := arr[0].AsInt64()
	if err != nil {
		return malformed("fenced set")
	}
	if ok == 1 {
		return s.confirm(ctx, p)
	}
	obs.GuardRefused(ctx, "redisstore", obs.GuardFencedSet)
	return &fence.StaleError{Resource: resource, Fence: f, Current: parseFence(&arr[1])}
}

// parseFence reads a fence from a bulk string reply (0 if it is missing or
// malformed).
func parseFence(m *rclient.Message) uint64 {
	str, err := m.ToString()
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseUint(str, 10, 64)
	return f
}

// FencedGet returns resource's value and the greatest fence admitted for it
// (nil, 0 if never written), read in one MGET.
func (s *Store) FencedGet(ctx context.Context, resource string) ([]byte, uint64, error) {
	if err := leasedriver.ValidateKey(resource); err != nil {
		return nil, 0, err
	}
	vk, fk := s.valueKeys(resource)
	arr, err := s.c.Do(ctx, rclient.Cmd{Name: "MGET", Keys: []string{vk, fk}, ReadOnly: true}).ToArray()
	if err != nil {
		return nil, 0, s.fail(err)
	}
	if len(arr) != 2 {
		return nil, 0, malformed("MGET")
	}
	var value []byte
	if !arr[0].IsNil() {
		if value, err = arr[0].AsBytes(); err != nil {
			return nil, 0, malformed("MGET")
		}
	}
	var f uint64
	if !arr[1].IsNil() {
		str, err := arr[1].ToString()
		if err != nil {
			return nil, 0, malformed("MGET")
		}
		if f, err = strconv.ParseUint(str, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("redisstore: malformed admitted fence of %q", resource)
		}
	}
	return value, f, nil
}

// HolderSet writes value to resource only while l is the current holder of
// its key: same token and fence, lock not expired on the server's clock.
// This is the strict holder check, atomic with the write; unlike a
// max-fence guard it refuses a holder whose lease expired even before the
// next holder wrote. Otherwise it returns lease.ErrNotHeld (or a
// *fence.StaleError if the resource admitted a newer fence) and changes
// nothing. The fence is admitted for resource as by FencedSetAtLeast.
//
// The lease's keys and the resource's keys are touched by one script, so on
// Redis Cluster they must share a hash slot: a resource named like the
// lease key always does. Other pairs are refused on a cluster with an error
// before anything is sent.
func (s *Store) HolderSet(ctx context.Context, l *lease.Lease, resource string, value []byte) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", lease.ErrInvalid)
	}
	if err := leasedriver.ValidateKey(resource); err != nil {
		return err
	}
	if s.cluster && slot(escape(l.Key())) != slot(escape(resource)) {
		return fmt.Errorf("%w: on Redis Cluster, HolderSet needs resource %q in the hash slot of lease key %q", lease.ErrInvalid, resource, l.Key())
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	lock, lf := s.leaseKeys(l.Key())
	vk, fk := s.valueKeys(resource)
	// The fenced-set script in holder mode: the holder check, then the
	// fence admitted as by FencedSetAtLeast.
	res, p := s.write(ctx, fencedSetScript, []string{vk, fk, lock, lf},
		[]string{strconv.FormatUint(l.Fence(), 10), "h", rueidis.BinaryString(value), l.Token().Reveal()}, false)
	arr, err := res.ToArray()
	if err != nil {
		return s.fail(err)
	}
	if len(arr) < 1 {
		return malformed("holder set")
	}
	ok, err := arr[0].AsInt64()
	if err != nil {
		return malformed("holder set")
	}
	switch {
	case ok == 1:
		return s.confirm(ctx, p)
	case ok == -1:
		obs.GuardRefused(ctx, "redisstore", obs.GuardCheckHolder)
		return lease.ErrNotHeld
	case len(arr) == 2:
		obs.GuardRefused(ctx, "redisstore", obs.GuardFencedSet)
		return &fence.StaleError{Resource: resource, Fence: l.Fence(), Current: parseFence(&arr[1])}
	}
	return malformed("holder set")
}

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// slot returns the Redis Cluster hash slot of the hash tag {tag}: CRC16
// (XMODEM) modulo 16384.
func slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return crc & (slots - 1)
}

// slotOf is slot for a byte slice.
func slotOf(tag []byte) uint16 {
	var crc uint16
	for _, c := range tag {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return crc & (slots - 1)
}

// crc16Table is the CRC16 (XMODEM, polynomial 0x1021) of each byte.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
