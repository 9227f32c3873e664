package traffic

import (
	"sync/atomic"
	"unsafe"
)

// idCache finds a rule's series by the address of its ID's bytes, without
// hashing or comparing them: the engine hands every decision the rule IDs
// of its snapshot, the same strings each time. It is direct-mapped; a slot
// taken by another ID is left to it (that rule is found through the map),
// so a lookup never allocates once its rule's slot is filled.
type idCache struct {
	slots [idSlots]atomic.Pointer[idEntry]
}

const idSlots = 256

type idEntry struct {
	data unsafe.Pointer // the ID's bytes, held (kept alive) by the entry
	n    int
	s    *series
}

func idSlot(p unsafe.Pointer) int {
	u := uintptr(p)
	return int((u>>4 ^ u>>12) % idSlots)
}

// get returns the series cached for the string id is, nil when none.
func (c *idCache) get(id string) *series {
	p := unsafe.Pointer(unsafe.StringData(id))
	if e := c.slots[idSlot(p)].Load(); e != nil && e.data == p && e.n == len(id) {
		return e.s
	}
	return nil
}

// put caches s for id when id's slot is free.
func (c *idCache) put(id string, s *series) {
	if len(id) == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.StringData(id))
	sl := &c.slots[idSlot(p)]
	if sl.Load() == nil {
		sl.CompareAndSwap(nil, &idEntry{data: p, n: len(id), s: s})
	}
}

// clear empties every slot.
func (c *idCache) clear() {
	for i := range c.slots {
		c.slots[i].Store(nil)
	}
}
