package rules

// The policy names under which ratelimitd counts its own limits in the
// service's store: the admin API's per-token reads and writes (package
// adminauth), keyed by the identity "token:NAME". Store keys are a
// policy and an identity, and a rule's counters are keyed by its ID and
// the caller's identifier, so a rule with one of these IDs would count on
// the admin limits' keys: its overrides would raise or block a token's
// admin calls and unauthenticated checks would spend them. New refuses
// them as rule IDs.
const (
	PolicyAdminRead  = "admin_read"
	PolicyAdminWrite = "admin_write"
)

// Reserved reports whether id is a policy name ratelimitd keeps for its
// own limits (PolicyAdminRead, PolicyAdminWrite), which no rule may take.
func Reserved(id string) bool {
	return id == PolicyAdminRead || id == PolicyAdminWrite
}
