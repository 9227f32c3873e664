package core

// LimitCheck returns the index of the check of Limit.Validate that l fails
// first (-1 when l is valid), the field it names and the number of checks:
// the cases that tests derive from the validation code.
func LimitCheck(l Limit) (index int, field string, checks int) {
	i := l.failed()
	if i >= 0 {
		field = limitChecks[i].field
	}
	return i, field, len(limitChecks)
}
