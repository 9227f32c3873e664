package lease

// Sweep runs one pass of the sweeper and makes the refunds it queued, now.
func (s *Store) Sweep() {
	s.sweep()
	s.drain()
}

// Drain makes the queued refunds now.
func (s *Store) Drain() { s.drain() }

// Tick reads the Store's clock, as every op does: a clock stepped back
// and then moved on between two readings counts only the net movement.
func (s *Store) Tick() { s.local() }
