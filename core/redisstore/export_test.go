package redisstore

// QueuedCalls returns how many calls of s wait for a pipeline, on every
// node.
func QueuedCalls(s *Store) int {
	n := 0
	if s.batch != nil {
		n += s.batch.Queued()
	}
	if m := s.batchers.Load(); m != nil {
		for _, b := range *m {
			n += b.Queued()
		}
	}
	return n
}
