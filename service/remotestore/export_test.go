package remotestore

// QueuedTakes returns how many Takes of s wait for a TakeBatch.
func QueuedTakes(s *Store) int {
	if s.batch == nil {
		return 0
	}
	return s.batch.Queued()
}
