package grpclimit

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// Metadata keys: the names of the rate-limit fields (ratelimitfields.Field)
// in lower case, as gRPC requires, and the gRFC A6 retry pushback.
const (
	MetadataRateLimitPolicy = "ratelimit-policy"
	MetadataRateLimit       = "ratelimit"
	MetadataLimit           = "x-ratelimit-limit"
	MetadataRemaining       = "x-ratelimit-remaining"
	MetadataReset           = "x-ratelimit-reset"
	MetadataState           = "x-ratelimit-state"
	MetadataRetryAfter      = "retry-after"
	// MetadataPushback is the trailer that tells gRPC clients when to retry
	// (milliseconds) or, when negative, not to retry.
	MetadataPushback = "grpc-retry-pushback-ms"
)

// The ErrorInfo of a denied call.
const (
	ErrorReason = "RATE_LIMIT_EXCEEDED"
	ErrorDomain = "sluice.dev"
)

// metadataKeys are the metadata keys of the fields, by ratelimitfields.Field.
var metadataKeys = [ratelimitfields.MaxFields]string{
	ratelimitfields.FieldRateLimitPolicy: MetadataRateLimitPolicy,
	ratelimitfields.FieldRateLimit:       MetadataRateLimit,
	ratelimitfields.FieldLimit:           MetadataLimit,
	ratelimitfields.FieldRemaining:       MetadataRemaining,
	ratelimitfields.FieldReset:           MetadataReset,
	ratelimitfields.FieldState:           MetadataState,
	ratelimitfields.FieldRetryAfter:      MetadataRetryAfter,
}

// Metadata returns the formatted fields f as gRPC metadata: the same values
// under lower-case keys, with one allocation for all the value slices.
func Metadata(f ratelimitfields.Fields) metadata.MD {
	md := make(metadata.MD, f.N+1) // room for the pushback
	vals := make([]string, f.N)
	for i := range f.N {
		vals[i] = f.Value[i]
		md[metadataKeys[f.Field[i]]] = vals[i : i+1 : i+1]
	}
	return md
}

// retryMargin is added to every wait sent to a client: a client that
// counts the pushback from the moment it sent the call (rather than from
// the moment it got the answer), or whose clock ticks coarsely, is then
// still not early.
const retryMargin = time.Millisecond

// retryMillis is the wait of a denied Decision (ratelimitfields.Retry) plus
// extra (the time the decision took) and retryMargin, in milliseconds
// rounded up and capped at the largest int32; never is true when no wait
// lets the call through.
func retryMillis(d *core.Decision, extra time.Duration) (ms int64, never bool) {
	wait, never := ratelimitfields.Retry(d)
	if never {
		return -1, true
	}
	return min(ceilMillis(wait+max(extra, 0)+retryMargin), math.MaxInt32), false
}

// Pushback returns the grpc-retry-pushback-ms value of a denied Decision:
// the wait until every policy that denied it admits the call
// (ratelimitfields.Retry) plus a millisecond of margin, in milliseconds rounded
// up and capped at the largest int32, or "-1" (do not retry) when the call
// can never be admitted. A client that retries the pushback after it sent
// the denied call is admitted. The interceptors also add the time the
// decision took.
func Pushback(d *core.Decision) string { return pushback(d, 0) }

func pushback(d *core.Decision, extra time.Duration) string {
	ms, _ := retryMillis(d, extra)
	return strconv.FormatInt(ms, 10)
}

// DeniedError returns DeniedStatus(d) as an error.
func DeniedError(d *core.Decision) error { return deniedStatus(d, 0).Err() }

// DeniedStatus returns the status of a denied call: codes.ResourceExhausted
// with RetryInfo (unless the call can never be admitted), a QuotaFailure
// with one violation per policy that denied, and an ErrorInfo. Use it from a
// custom denied handler to keep the standard details.
func DeniedStatus(d *core.Decision) *status.Status { return deniedStatus(d, 0) }

func deniedStatus(d *core.Decision, extra time.Duration) *status.Status {
	b := d.Bound()
	ms, never := retryMillis(d, extra)
	wait := time.Duration(ms) * time.Millisecond
	var msg string
	switch {
	case b.Unidentified:
		msg = fmt.Sprintf("rate limit: the call has no identity for policy %q; it cannot be admitted without one", b.Policy)
	case never:
		msg = fmt.Sprintf("rate limit: the call costs more than policy %q allows at once; it can never be admitted", b.Policy)
	default:
		msg = fmt.Sprintf("rate limit exceeded (policy %q); retry in %s", b.Policy, wait)
	}
	st := status.New(codes.ResourceExhausted, msg)
	details := make([]protoadapt.MessageV1, 0, 3)
	if !never {
		// The pushback's whole milliseconds: a client that waits exactly
		// this long is admitted.
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	}
	qf := &errdetails.QuotaFailure{}
	for _, p := range d.Results {
		if p.Allowed || p.Shadow { // shadow policies are trials: not violations
			continue
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + p.Policy,
			Description: fieldfmt.Violation(&p),
			QuotaId:     p.Policy,
			QuotaValue:  p.Capacity,
		})
	}
	details = append(details, qf, &errdetails.ErrorInfo{
		Reason: ErrorReason,
		Domain: ErrorDomain,
		Metadata: map[string]string{
			"policy":         b.Policy,
			"limit":          strconv.FormatInt(b.Capacity, 10),
			"remaining":      strconv.FormatInt(b.Remaining, 10),
			"reset_after_ms": strconv.FormatInt(ceilMillis(b.ResetAfter), 10),
			"retry_after_ms": strconv.FormatInt(ms, 10),
			"state":          d.State().String(),
		},
	})
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Millisecond) + 1
}

// format returns the fields h selects of d, relative to the instant d was
// decided at on the store's clock (now when no store decided it), as every
// sluice adapter sends them.
func format(h ratelimitfields.Config, d *core.Decision, now time.Time) ratelimitfields.Fields {
	return h.Format(d, fieldfmt.DecidedAt(d, now))
}

// denialMetadata is the trailer of a denied call: its rate-limit metadata
// and the retry pushback.
func denialMetadata(h ratelimitfields.Config, d *core.Decision, now time.Time, extra time.Duration) metadata.MD {
	md := Metadata(format(h, d, now))
	md[MetadataPushback] = []string{pushback(d, extra)}
	return md
}
