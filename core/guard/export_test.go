package guard

// DenyCacheLen returns the number of denials s holds.
func DenyCacheLen(s *Store) int { return s.deny.len() }
